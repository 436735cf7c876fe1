package tier

import (
	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints/tomlconf"
)

// decodeConfig fills c from the document, key by key (etc/README.md is the
// reference for every key). Validation of values and relations comes after.
func (d *decoder) decodeConfig(c *Config) {
	var kind string
	var worker *ProcessConfig
	var elastic *Elastic
	top := map[string]tomlconf.Field{
		"tier":          d.String(&c.Tier),
		"kind":          d.String(&kind),
		"endpoint_dir":  d.String(&c.EndpointDir),
		"log_dir":       d.String(&c.LogDir),
		"node_address":  d.String(&c.NodeAddress),
		"endpoint_host": d.String(&c.EndpointHost),
		"hint_addr":     d.String(&c.HintAddr),
		"min_workers":   d.Int(&c.MinWorkers),
		"tensor_split":  d.Numbers(&c.TensorSplit),
		"srun":          d.String(&c.Srun),
		"head":          d.process(&c.Head, RoleHead),
		"worker": func(key toml.Key, v any) {
			worker = defaultWorker()
			d.process(worker, RoleWorker)(key, v)
		},
		"timeouts": d.timeouts(&c.Timeouts),
		"restart":  d.restart(&c.Restart),
		"drain":    d.drain(&c.Drain),
		"elastic": func(key toml.Key, v any) {
			elastic = defaultElastic()
			d.elastic(elastic)(key, v)
		},
	}
	d.Root(top)
	d.decoded()
	c.Kind = Kind(kind)
	c.Worker = worker
	c.Elastic = elastic
}

// process is the field for [head] or [worker].
func (d *decoder) process(p *ProcessConfig, role Role) tomlconf.Field {
	return func(key toml.Key, v any) {
		fields := map[string]tomlconf.Field{
			"command":   d.Strings(&p.Command),
			"port":      d.Int(&p.Port),
			"env":       d.StringMap(&p.Env),
			"srun_args": d.Strings(&p.SrunArgs),
			"log_file":  d.String(&p.LogFile),
		}
		misplaced := map[string]string{}
		workerOnly := map[string]tomlconf.Field{
			"port_step":     d.Int(&p.PortStep),
			"ready_pattern": d.String(&p.ReadyPattern),
		}
		for k, f := range workerOnly {
			if role == RoleWorker {
				fields[k] = f
			} else {
				misplaced[k] = "only allowed in [worker]"
			}
		}
		headOnly := map[string]tomlconf.Field{
			"slot_save_dir":             d.String(&p.SlotSave.Dir),
			"slot_save_ttl":             d.Duration(&p.SlotSave.TTL),
			"slot_save_max_bytes":       d.Bytes(&p.SlotSave.MaxBytes),
			"slot_save_bytes_per_token": d.Int64(&p.SlotSave.BytesPerToken),
		}
		for k, f := range headOnly {
			if role == RoleHead {
				fields[k] = f
			} else {
				misplaced[k] = "only allowed in [head]"
			}
		}
		d.Table(key, v, fields, misplaced)
	}
}

// timeouts is the field for [timeouts].
func (d *decoder) timeouts(t *Timeouts) tomlconf.Field {
	return func(key toml.Key, v any) {
		d.Table(key, v, map[string]tomlconf.Field{
			"worker_start":    d.Duration(&t.WorkerStart),
			"load":            d.Duration(&t.Load),
			"health_interval": d.Duration(&t.HealthInterval),
			"health_timeout":  d.Duration(&t.HealthTimeout),
			"unhealthy_after": d.Duration(&t.UnhealthyAfter),
			"stall":           d.Duration(&t.Stall),
			"stop_grace":      d.Duration(&t.StopGrace),
			"heartbeat":       d.Duration(&t.Heartbeat),
			"lease":           d.Duration(&t.Lease),
		}, nil)
	}
}

// restart is the field for [restart].
func (d *decoder) restart(r *RestartSettings) tomlconf.Field {
	return func(key toml.Key, v any) {
		d.Table(key, v, map[string]tomlconf.Field{
			"initial_backoff":       d.Duration(&r.InitialBackoff),
			"max_backoff":           d.Duration(&r.MaxBackoff),
			"multiplier":            d.Number(&r.Multiplier),
			"jitter":                d.Number(&r.Jitter),
			"max_failures":          d.Int(&r.MaxFailures),
			"window":                d.Duration(&r.Window),
			"reset_after":           d.Duration(&r.ResetAfter),
			"worker_start_failures": d.Int(&r.WorkerStartFailures),
		}, nil)
	}
}

// drain is the field for [drain].
func (d *decoder) drain(s *DrainSettings) tomlconf.Field {
	return func(key toml.Key, v any) {
		d.Table(key, v, map[string]tomlconf.Field{
			"budget":          d.Duration(&s.Budget),
			"inflight_poll":   d.Duration(&s.InFlightPoll),
			"max_failed_runs": d.Int(&s.MaxFailedRuns),
		}, nil)
	}
}
