package tier

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints/kvsave"
)

var (
	tierPattern    = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// validate checks values and relations of a decoded config. A key that
// failed to decode holds its default; problems with it are not repeated.
func (d *decoder) validate(c *Config) {
	d.validating = true
	d.validateTop(c)
	d.validateKind(c)
	if d.defined("head") {
		d.validateProcess(c, &c.Head, RoleHead)
	} else {
		d.fail(toml.Key{"head"}, "required table [head] is missing")
	}
	if c.Worker != nil && c.Kind == KindDistributed {
		d.validateProcess(c, c.Worker, RoleWorker)
	}
	d.validateTimeouts(c)
	d.validateRestart(&c.Restart)
	d.validateDrain(c)
	if c.Elastic != nil {
		d.validateElastic(c)
	}
}

// defined reports whether the file sets key.
func (d *decoder) defined(key ...string) bool { return d.pos.IsDefined(key...) }

// validateTop checks the top-level scalar keys.
func (d *decoder) validateTop(c *Config) {
	switch {
	case !d.defined("tier"):
		d.fail(toml.Key{"tier"}, "required")
	case !tierPattern.MatchString(c.Tier):
		d.fail(toml.Key{"tier"}, "must be 1-32 characters of a-z, 0-9, _ and - (got %q)", c.Tier)
	}
	d.absDir(toml.Key{"endpoint_dir"}, c.EndpointDir)
	d.absDir(toml.Key{"log_dir"}, c.LogDir)
	d.validateNodeAddress(c.NodeAddress)
	if err := checkTemplate(c.EndpointHost, endpointHostPlaceholders); err != nil {
		d.fail(toml.Key{"endpoint_host"}, "%v", err)
	} else if strings.ContainsAny(c.EndpointHost, " \t/") {
		d.fail(toml.Key{"endpoint_host"}, "must be a host name or address (got %q)", c.EndpointHost)
	}
	d.program(toml.Key{"srun"}, c.Srun)
	if c.HintAddr != "" {
		for _, a := range strings.Split(c.HintAddr, ",") {
			if host, port, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil || host == "" || port == "" {
				d.fail(toml.Key{"hint_addr"}, "must be host:port, the controller's hint_listen, or several separated by commas (got %q)", c.HintAddr)
				break
			}
		}
	}
}

// absDir checks a required absolute directory.
func (d *decoder) absDir(key toml.Key, dir string) {
	switch {
	case !d.defined(key...):
		d.fail(key, "required")
	case !path.IsAbs(dir):
		d.fail(key, "must be an absolute path (got %q)", dir)
	}
}

// validateNodeAddress checks node_address: slurm, name, or a {node} template.
func (d *decoder) validateNodeAddress(s string) {
	key := toml.Key{"node_address"}
	if s == NodeAddressSlurm || s == NodeAddressName {
		return
	}
	if err := checkTemplate(s, nodeAddressPlaceholders); err != nil {
		d.fail(key, "%v", err)
		return
	}
	if !usesPlaceholder(s, phNode) {
		d.fail(key, `must be "slurm", "name" or a template using {node} (got %q)`, s)
	}
}

// program checks a program: a name looked up in PATH or an absolute path.
func (d *decoder) program(key toml.Key, p string) {
	switch {
	case p == "":
		d.fail(key, "must not be empty")
	case strings.Contains(p, "/") && !path.IsAbs(p):
		d.fail(key, "must be a program name (looked up in PATH) or an absolute path (got %q)", p)
	}
}

// validateKind checks kind and what depends on it: [worker], min_workers, tensor_split.
func (d *decoder) validateKind(c *Config) {
	switch c.Kind {
	case KindSingle:
		for _, k := range []string{"worker", "min_workers", "tensor_split"} {
			if d.defined(k) {
				d.fail(toml.Key{k}, `not allowed in a single tier (kind = "single" has no workers)`)
			}
		}
	case KindDistributed:
		if !d.defined("worker") {
			d.fail(toml.Key{"worker"}, `required table [worker] is missing (kind = "distributed")`)
		}
		d.validateWorkerCounts(c)
	case "":
		if d.defined("kind") {
			d.fail(toml.Key{"kind"}, `must be "single" or "distributed" (got "")`)
		} else {
			d.fail(toml.Key{"kind"}, `required ("single" or "distributed")`)
		}
	default:
		d.fail(toml.Key{"kind"}, `must be "single" or "distributed" (got %q)`, c.Kind)
	}
}

// validateWorkerCounts checks min_workers and tensor_split of a distributed tier.
func (d *decoder) validateWorkerCounts(c *Config) {
	if !d.defined("min_workers") {
		c.MinWorkers = 1
	} else if c.MinWorkers < 1 {
		d.fail(toml.Key{"min_workers"}, "must be at least 1 (got %d)", c.MinWorkers)
	}
	if !d.defined("tensor_split") {
		return
	}
	key := toml.Key{"tensor_split"}
	if len(c.TensorSplit) < 2 {
		d.fail(key, "needs a weight for the head and for each worker, at least 2 (got %d)", len(c.TensorSplit))
		return
	}
	for i, w := range c.TensorSplit {
		if w <= 0 {
			d.fail(key, "weight %d must be greater than 0 (got %g)", i, w)
		}
	}
	if workers := len(c.TensorSplit) - 1; c.MinWorkers > workers {
		d.fail(toml.Key{"min_workers"}, "needs %d workers but tensor_split has %d weights (the head and %s)",
			c.MinWorkers, len(c.TensorSplit), plural(workers, "worker"))
	}
}

// placeholdersFor is the placeholder set for a role's command and env.
func placeholdersFor(c *Config, role Role) placeholderSet {
	switch {
	case role == RoleWorker:
		return workerPlaceholders
	case c.Elastic != nil:
		return elasticPlaceholders
	case c.Kind == KindDistributed:
		return headPlaceholders
	default:
		return singlePlaceholders
	}
}

// validateProcess checks a [head] or [worker] table.
func (d *decoder) validateProcess(c *Config, p *ProcessConfig, role Role) {
	table := string(role)
	key := func(k ...string) toml.Key { return append(toml.Key{table}, k...) }
	set := placeholdersFor(c, role)
	d.validateCommand(key("command"), p.Command, set)
	if role == RoleHead && c.Kind == KindDistributed && len(p.Command) > 0 && !commandUses(p.Command, phRPC) {
		d.fail(key("command"), `a distributed head must be given its workers: add "--rpc", "{rpc}"`)
	}
	switch {
	case !d.defined(table, "port"):
		d.fail(key("port"), "required")
	case p.Port < 1 || p.Port > 65535:
		d.fail(key("port"), "must be between 1 and 65535 (got %d)", p.Port)
	}
	if p.PortStep < 0 {
		d.fail(key("port_step"), "must not be negative (got %d)", p.PortStep)
	}
	for _, name := range sortedKeys(p.Env) {
		if !envNamePattern.MatchString(name) {
			d.fail(key("env", name), "not a valid environment variable name")
		} else if err := checkTemplate(p.Env[name], set); err != nil {
			d.fail(key("env", name), "%v", err)
		}
	}
	for i, a := range p.SrunArgs {
		if a == "" {
			d.fail(key("srun_args"), "element %d is empty", i)
		}
	}
	d.validateLogFile(key("log_file"), p.LogFile)
	if role == RoleHead {
		d.validateSlotSave(c, p)
	}
}

// validateSlotSave checks the head's slot_save_* keys: an absolute
// directory, bounds that are not negative, and a head that names its model
// file (the saved slots' identity is read from it).
func (d *decoder) validateSlotSave(c *Config, p *ProcessConfig) {
	s := p.SlotSave
	key := func(k string) toml.Key { return toml.Key{"head", k} }
	if s.Dir == "" {
		for _, k := range []string{"slot_save_ttl", "slot_save_max_bytes", "slot_save_bytes_per_token"} {
			if d.defined("head", k) {
				d.fail(key(k), "needs head.slot_save_dir")
			}
		}
		return
	}
	if c.Elastic != nil {
		d.fail(key("slot_save_dir"), "not for an elastic tier yet: its drain is its members'")
		return
	}
	if !path.IsAbs(s.Dir) {
		d.fail(key("slot_save_dir"), "must be an absolute path (got %q)", s.Dir)
	}
	if s.TTL < 0 {
		d.fail(key("slot_save_ttl"), "must not be negative (got %s)", s.TTL)
	}
	if s.MaxBytes < 0 {
		d.fail(key("slot_save_max_bytes"), "must not be negative")
	}
	if s.BytesPerToken < 0 {
		d.fail(key("slot_save_bytes_per_token"), "must not be negative")
	}
	if kvsave.ModelPath(p.Command) == "" {
		d.fail(key("slot_save_dir"), "the head's command names no model file (-m): slots are saved for a single-model head only")
	}
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// commandUses reports whether any argument uses {name}.
func commandUses(argv []string, name string) bool {
	for _, a := range argv {
		if usesPlaceholder(a, name) {
			return true
		}
	}
	return false
}

// validateCommand checks an argv template.
func (d *decoder) validateCommand(key toml.Key, argv []string, set placeholderSet) {
	if !d.defined(key...) {
		d.fail(key, "required (the program and its arguments, as an array)")
		return
	}
	if len(argv) == 0 {
		d.fail(key, "must not be empty (the program and its arguments)")
		return
	}
	for i, a := range argv {
		if err := checkTemplate(a, set); err != nil {
			d.fail(key, "argv[%d]: %v", i, err)
		}
	}
	if !strings.Contains(argv[0], "{") {
		d.program(key, argv[0])
	}
}

// validateLogFile checks a log_file template: relative, inside the job's log dir.
func (d *decoder) validateLogFile(key toml.Key, s string) {
	if err := checkTemplate(s, logFilePlaceholders); err != nil {
		d.fail(key, "%v", err)
		return
	}
	clean := path.Clean(s)
	switch {
	case s == "":
		d.fail(key, "must not be empty")
	case path.IsAbs(s) || clean == ".." || strings.HasPrefix(clean, "../") || clean == ".":
		d.fail(key, "must be a file name relative to <log_dir>/<job id> (got %q)", s)
	}
}

// positive fails key unless v > 0.
func (d *decoder) positive(key toml.Key, v time.Duration) {
	if v <= 0 {
		d.fail(key, "must be greater than 0 (got %s)", v)
	}
}

// validateTimeouts checks [timeouts].
func (d *decoder) validateTimeouts(c *Config) {
	t := c.Timeouts
	key := func(k string) toml.Key { return toml.Key{"timeouts", k} }
	for k, v := range map[string]time.Duration{
		"worker_start": t.WorkerStart, "load": t.Load, "health_interval": t.HealthInterval,
		"health_timeout": t.HealthTimeout, "unhealthy_after": t.UnhealthyAfter, "stall": t.Stall,
		"stop_grace": t.StopGrace, "heartbeat": t.Heartbeat, "lease": t.Lease,
	} {
		d.positive(key(k), v)
	}
	if t.Heartbeat > 0 && t.Lease <= t.Heartbeat {
		d.fail(d.blame(key("lease"), key("heartbeat")), "lease (%s) must be longer than heartbeat (%s)", t.Lease, t.Heartbeat)
	}
	if t.HealthInterval > 0 && t.Stall > 0 && t.Stall < 2*t.HealthInterval {
		d.fail(d.blame(key("stall"), key("health_interval")),
			"stall (%s) must be at least 2 × health_interval (%s): progress is read once per health check", t.Stall, t.HealthInterval)
	}
	if t.HealthInterval > 0 && t.UnhealthyAfter < t.HealthInterval {
		d.fail(d.blame(key("unhealthy_after"), key("health_interval")),
			"unhealthy_after (%s) must be at least health_interval (%s)", t.UnhealthyAfter, t.HealthInterval)
	}
}

// blame picks the first of keys the file sets (a relation between two
// settings is reported where the admin wrote one), else the first.
func (d *decoder) blame(keys ...toml.Key) toml.Key {
	for _, k := range keys {
		if d.defined(k...) {
			return k
		}
	}
	return keys[0]
}

// validateRestart checks [restart].
func (d *decoder) validateRestart(r *RestartSettings) {
	key := func(k string) toml.Key { return toml.Key{"restart", k} }
	d.positive(key("initial_backoff"), r.InitialBackoff)
	d.positive(key("window"), r.Window)
	d.positive(key("reset_after"), r.ResetAfter)
	if r.MaxBackoff < r.InitialBackoff {
		d.fail(d.blame(key("max_backoff"), key("initial_backoff")),
			"max_backoff (%s) must be at least initial_backoff (%s)", r.MaxBackoff, r.InitialBackoff)
	}
	if r.Multiplier < 1 {
		d.fail(key("multiplier"), "must be at least 1 (got %g)", r.Multiplier)
	}
	if r.Jitter < 0 || r.Jitter > 1 {
		d.fail(key("jitter"), "must be between 0 and 1 (got %g)", r.Jitter)
	}
	if r.MaxFailures < 1 {
		d.fail(key("max_failures"), "must be at least 1 (got %d)", r.MaxFailures)
	}
	if r.WorkerStartFailures < 1 {
		d.fail(key("worker_start_failures"), "must be at least 1 (got %d)", r.WorkerStartFailures)
	}
}

// validateDrain checks [drain]. The budget must pay for the ordered stop
// as srun steps take it (Split with ShimMargin) and leave at least
// MinInFlightWait for requests in flight; the error says what it buys.
func (d *decoder) validateDrain(c *Config) {
	s := c.Drain
	key := func(k string) toml.Key { return toml.Key{"drain", k} }
	d.positive(key("budget"), s.Budget)
	d.positive(key("inflight_poll"), s.InFlightPoll)
	if s.MaxFailedRuns < 1 {
		d.fail(key("max_failed_runs"), "must be at least 1 (got %d)", s.MaxFailedRuns)
	}
	if s.Budget > 0 && s.InFlightPoll >= s.Budget {
		d.fail(key("inflight_poll"), "must be shorter than drain.budget (%s)", s.Budget)
	}
	if c.Timeouts.StopGrace <= 0 || s.Budget <= 0 {
		return
	}
	split := Split(c.Kind, c.Timeouts, s, ShimMargin)
	if split.InFlight < MinInFlightWait {
		d.fail(d.blame(key("budget"), toml.Key{"timeouts", "stop_grace"}),
			"drain.budget (%s) must be at least %s: the ordered stop takes %s (%s), and requests in flight need at least %s; it would leave %s for them",
			s.Budget, split.Stop()+MinInFlightWait, split.Stop(), stopParts(split), MinInFlightWait, split.InFlight)
	}
}

// stopParts names what the ordered stop is made of.
func stopParts(s DrainSplit) string {
	parts := fmt.Sprintf("head %s = stop_grace + %s shim margin", s.HeadStop, ShimMargin)
	if s.WorkerStop > 0 {
		parts += fmt.Sprintf(", then workers %s", s.WorkerStop)
	}
	return parts + fmt.Sprintf(", last resort %s", s.Kill)
}
