package keeper

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/members"
	"slurm-llm/slurm"
)

// Metrics are the keeper's figures for Prometheus (`[metrics] listen` in
// keeper.toml): per tier, the jobs it wants and what Slurm and the files
// say of them, and counters of what it did. The job counts come from the
// last listing that saw them (the release check every release_interval,
// the pass, the scale check every scale_interval); routed replicas and
// live members are read from the endpoint directory at each scrape.
type Metrics struct {
	mu sync.Mutex
	// kept and extras are each tier's jobs of its job name and of its
	// extra_job_name, as the last listing of them saw them.
	kept, extras map[string]jobCount
	// extrasWanted is, per tier with replicas, the extras the last scale
	// check left wanted: those alive, less the ones it cancelled, plus the
	// one it submitted.
	extrasWanted map[string]int
	submitted    map[tierKind]uint64
	cancelled    map[tierKind]uint64
	released     map[string]uint64
	schedErrors  uint64
	lastListing  time.Time
}

// jobCount is a tier's jobs by Slurm state.
type jobCount struct{ pending, running int }

// tierKind keys the counters: a tier and "kept" or "extra".
type tierKind struct{ tier, kind string }

func newMetrics() *Metrics {
	return &Metrics{kept: map[string]jobCount{}, extras: map[string]jobCount{}, extrasWanted: map[string]int{},
		submitted: map[tierKind]uint64{}, cancelled: map[tierKind]uint64{}, released: map[string]uint64{}}
}

// Metrics returns the keeper's metrics.
func (k *Keeper) Metrics() *Metrics { return k.metrics }

// countStates counts jobs by state: pending (requeued and held included)
// and running (completing included: its node is not free yet).
func countStates[J any](jobs []J, state func(J) slurm.JobState) jobCount {
	var c jobCount
	for _, j := range jobs {
		switch s := state(j); {
		case s.Queued():
			c.pending++
		case s == slurm.JobRunning, s == slurm.JobCompleting, s == slurm.JobSignaling, s == slurm.JobSuspended, s == "CONFIGURING":
			c.running++
		}
	}
	return c
}

// listedKept records a listing of every tier's kept jobs (the release
// check's squeue: every tier's job name, the submitting account's).
func (m *Metrics) listedKept(cfg Config, jobs []slurm.QueuedJob, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range cfg.TierNames() {
		jobName := cfg.Tiers[name].JobName
		var mine []slurm.QueuedJob
		for _, j := range jobs {
			if j.Name == jobName {
				mine = append(mine, j)
			}
		}
		m.kept[name] = countStates(mine, func(j slurm.QueuedJob) slurm.JobState { return j.State })
	}
	m.lastListing = now
}

// listedTier records one tier's kept jobs as a pass listed them.
func (m *Metrics) listedTier(tier string, jobs []slurm.JobRef, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept[tier] = countStates(jobs, func(j slurm.JobRef) slurm.JobState { return j.State })
	m.lastListing = now
}

// scaled records what a scale check saw of a tier's extras and did.
func (m *Metrics) scaled(tier string, reps []Replica, res ScaleResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var extras []Replica
	for _, r := range reps {
		if r.Extra {
			extras = append(extras, r)
		}
	}
	m.extras[tier] = countStates(extras, func(r Replica) slurm.JobState { return r.State })
	wanted := len(extras) - len(res.Cancelled)
	if res.Submitted != "" {
		wanted++
	}
	m.extrasWanted[tier] = max(wanted, 0)
	m.submittedLocked(tier, "extra", boolCount(res.Submitted != ""))
	m.cancelled[tierKind{tier, "extra"}] += uint64(len(res.Cancelled))
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (m *Metrics) submittedLocked(tier, kind string, n int) {
	m.submitted[tierKind{tier, kind}] += uint64(n)
}

// did records what a pass did about a tier's kept jobs.
func (m *Metrics) did(tier string, submitted, cancelled int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.submittedLocked(tier, "kept", submitted)
	m.cancelled[tierKind{tier, "kept"}] += uint64(cancelled)
}

// releasedJob counts a requeued job released early.
func (m *Metrics) releasedJob(tier string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released[tier]++
}

// countingScheduler is the keeper's Scheduler: every call that fails is
// counted once, for llm_keeper_scheduler_errors_total, whoever made it.
type countingScheduler struct {
	Scheduler
	m *Metrics
}

func (c countingScheduler) count(err error) error {
	if err != nil {
		c.m.schedulerError()
	}
	return err
}

func (c countingScheduler) JobsByName(ctx context.Context, name string) ([]slurm.JobRef, error) {
	jobs, err := c.Scheduler.JobsByName(ctx, name)
	return jobs, c.count(err)
}

func (c countingScheduler) Submit(ctx context.Context, script string, sbatchArgs ...string) (string, error) {
	id, err := c.Scheduler.Submit(ctx, script, sbatchArgs...)
	return id, c.count(err)
}

func (c countingScheduler) Cancel(ctx context.Context, id string) error {
	return c.count(c.Scheduler.Cancel(ctx, id))
}

func (c countingScheduler) Queue(ctx context.Context, q slurm.QueueQuery) ([]slurm.QueuedJob, error) {
	jobs, err := c.Scheduler.Queue(ctx, q)
	return jobs, c.count(err)
}

func (c countingScheduler) ReleaseNow(ctx context.Context, id string) error {
	return c.count(c.Scheduler.ReleaseNow(ctx, id))
}

func (c countingScheduler) TestSubmit(ctx context.Context, script string, sbatchArgs ...string) (slurm.StartEstimate, error) {
	est, err := c.Scheduler.TestSubmit(ctx, script, sbatchArgs...)
	return est, c.count(err)
}

func (c countingScheduler) Partitions(ctx context.Context) (map[string]slurm.Partition, error) {
	parts, err := c.Scheduler.Partitions(ctx)
	return parts, c.count(err)
}

// schedulerError counts a scheduler call that failed or did not answer.
func (m *Metrics) schedulerError() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.schedErrors++
}

// keeperCollector makes the keeper's figures a Prometheus collector: each
// scrape reads the tiers' state files and the endpoint directory for the
// figures that are not counts of jobs (an unchecked collector: its series
// come and go with the tiers).
type keeperCollector struct{ k *Keeper }

func (keeperCollector) Describe(chan<- *prometheus.Desc) {}

// Gatherer is what the keeper's /metrics serves: its figures alone.
func (k *Keeper) Gatherer() prometheus.Gatherer {
	r := prometheus.NewRegistry()
	r.MustRegister(keeperCollector{k})
	return r
}

func (c keeperCollector) Collect(ch chan<- prometheus.Metric) {
	k := c.k
	live, leading := k.liveCounts()
	names := k.cfg.TierNames()
	states := make(map[string]TierState, len(names))
	for _, name := range names {
		states[name], _ = k.store.Load(name) // unreadable: the config's word
	}
	m := k.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	emit := func(name, help string, typ prometheus.ValueType, v float64, labels ...string) {
		var keys, values []string
		for i := 0; i+1 < len(labels); i += 2 {
			keys, values = append(keys, labels[i]), append(values, labels[i+1])
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, keys, nil), typ, v, values...)
	}
	const replicasHelp = "A tier's replicas (a tier without [replicas] is one): wanted (0 when disabled), " +
		"pending and running in Slurm (kept and extra), and routed (a ready endpoint file with a live lease). Elastic tiers are in llm_keeper_members."
	const membersHelp = "An elastic tier's members: wanted (0 when disabled), pending and running in Slurm, " +
		"live (a member file that says ready, with a live lease) and leading (1 when a member with a live lease leads the current term, else 0)."
	for _, name := range names {
		tc, st := k.cfg.Tiers[name], states[name]
		kept, extra := m.kept[name], m.extras[name]
		if tc.elastic() {
			wanted := 0
			if st.IsEnabled(tc) {
				wanted = tc.Members
			}
			for _, v := range []struct {
				state string
				n     int
			}{{"wanted", wanted}, {"pending", kept.pending}, {"running", kept.running}} {
				emit("llm_keeper_members", membersHelp, prometheus.GaugeValue, float64(v.n), "tier", name, "state", v.state)
			}
			if n, ok := live[name]; ok {
				emit("llm_keeper_members", membersHelp, prometheus.GaugeValue, float64(n), "tier", name, "state", "live")
				emit("llm_keeper_members", membersHelp, prometheus.GaugeValue, float64(leading[name]), "tier", name, "state", "leading")
			}
			continue
		}
		wanted := 0
		switch {
		case !st.IsEnabled(tc):
		case tc.Replicas.Max == 0:
			wanted = tc.Members
		default:
			wanted = EffectiveReplicas(tc, st).Min + m.extrasWanted[name]
		}
		for _, v := range []struct {
			state string
			n     int
		}{{"wanted", wanted}, {"pending", kept.pending + extra.pending}, {"running", kept.running + extra.running}} {
			emit("llm_keeper_replicas", replicasHelp, prometheus.GaugeValue, float64(v.n), "tier", name, "state", v.state)
		}
		if n, ok := live[name]; ok {
			emit("llm_keeper_replicas", replicasHelp, prometheus.GaugeValue, float64(n), "tier", name, "state", "routed")
		}
		if tc.Replicas.Max > 0 {
			r := EffectiveReplicas(tc, st)
			const help = "A tier's min and max replicas ([replicas], with an admin's `tier scale` applied)."
			emit("llm_keeper_replicas_bound", help, prometheus.GaugeValue, float64(r.Min), "tier", name, "bound", "min")
			emit("llm_keeper_replicas_bound", help, prometheus.GaugeValue, float64(r.Max), "tier", name, "bound", "max")
		}
	}
	byKind := func(name, help string, c map[tierKind]uint64) {
		for _, tier := range names {
			for _, kind := range []string{"kept", "extra"} {
				if kind == "extra" && !k.cfg.Tiers[tier].Replicas.Grows() {
					continue
				}
				emit(name, help, prometheus.CounterValue, float64(c[tierKind{tier, kind}]), "tier", tier, "kind", kind)
			}
		}
	}
	byKind("llm_keeper_submitted_total", "Jobs the keeper submitted: kept (the tier's job name) or extra (replicas above min).", m.submitted)
	byKind("llm_keeper_cancelled_total", "Jobs the keeper cancelled: kept (duplicates) or extra (idle, given way, over max, never started).", m.cancelled)
	for _, name := range names {
		emit("llm_keeper_released_total", "Requeued jobs the keeper released before Slurm's own hold ended.", prometheus.CounterValue,
			float64(m.released[name]), "tier", name)
	}
	emit("llm_keeper_scheduler_errors_total", "Scheduler calls (squeue, sbatch, scancel, scontrol) that failed or did not answer.",
		prometheus.CounterValue, float64(m.schedErrors))
	last := 0.0
	if !m.lastListing.IsZero() {
		last = float64(m.lastListing.UnixMilli()) / 1000
	}
	emit("llm_keeper_last_listing_timestamp_seconds", "When squeue last answered a listing of the tiers' jobs (0: never).",
		prometheus.GaugeValue, last)
}

// elastic reports whether the tier keeps members (one-node jobs of one
// elastic tier) rather than replicas.
func (t TierConfig) elastic() bool { return t.Replicas.Max == 0 && t.Members > 1 }

// liveCounts reads the endpoint directory (when the config names it): per
// tier, the ready endpoint files with a live lease of the tier's jobs
// (replicas routed), or for an elastic tier its ready member files with a
// live lease. A tier missing from the map was not read.
func (k *Keeper) liveCounts() (live, leading map[string]int) {
	out := map[string]int{}
	leading = map[string]int{}
	if k.cfg.EndpointDir == "" {
		return out, leading
	}
	now := k.now()
	scan, err := endpoints.ReadDir(k.cfg.EndpointDir, endpoints.ReadOptions{AllowedUIDs: []uint32{k.owner}})
	for _, name := range k.cfg.TierNames() {
		tc := k.cfg.Tiers[name]
		if tc.elastic() {
			c, err := members.NewStore(k.cfg.EndpointDir, name, []uint32{k.owner}).Read()
			if err != nil {
				continue
			}
			n := 0
			for _, mem := range c.Members {
				if mem.State == members.StateReady && mem.Live(now) {
					n++
				}
			}
			out[name] = n
			if _, ok := leader(c.Members, max(c.Term.N, c.Top), now); ok {
				leading[name] = 1
			} else {
				leading[name] = 0
			}
			continue
		}
		if err != nil {
			continue
		}
		n := 0
		for _, e := range scan.Entries {
			ep := e.Endpoint
			if ep.Tier == name && ep.State == endpoints.StateReady && now.Before(ep.LeaseExpires) {
				n++
			}
		}
		out[name] = n
	}
	return out, leading
}
