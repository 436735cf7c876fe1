package tiers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"slurm-llm/endpoints/fsutil"
)

// Metrics counts what the updater did, for Prometheus. Its zero value is
// ready to use; it is safe for one writer (the pass) and many readers.
type Metrics struct {
	mu               sync.Mutex
	passes           uint64
	passErrors       uint64
	reloads          uint64
	testFailures     uint64
	reloadFailures   uint64
	schedulerErrors  uint64
	schedulerCalls   uint64
	schedulerFailed  uint64
	hints            uint64
	rejectedTotal    uint64
	rejected         int
	skippedTotal     uint64
	servers          map[string]int
	lastGoodApply    time.Time
	lastPassDuration time.Duration
	// tiers are the availability metrics of each tier (RecordViews).
	tiers        map[string]*tierMetrics
	lastViews    time.Time
	recordErrors uint64
	staleRemoved uint64
	staleFailed  uint64
}

// tierMetrics are one tier's availability figures.
type tierMetrics struct {
	state        string
	seconds      map[string]float64 // state → seconds spent in it
	transitions  map[string]uint64  // new state → count
	preemptions  uint64
	outages      histogram // every outage, seconds
	recoveries   histogram // outages caused by a preemption, seconds
	replans      histogram // outages caused by an elastic tier's re-plan, seconds
	serving      string    // what a routed elastic tier serves with ("2 of 3 nodes, context 65536")
	reason       string    // the view's reason
	outageStart  time.Time // when the outage under way began (zero while routed)
	expectedBack *time.Time
	startToReady time.Duration
}

// histogramBuckets are the upper bounds (seconds) of the outage and
// recovery histograms: seconds for a release on a free node, minutes for
// a reload, hours for a long science job.
var histogramBuckets = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// histogram is a Prometheus histogram's state.
type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(histogramBuckets))
	}
	h.n++
	h.sum += v
	for i, b := range histogramBuckets {
		if v <= b {
			h.counts[i]++
			return
		}
	}
}

// RecordViews adds one applied pass's tier views: the time since the last
// such pass goes to each tier's previous state; outages that ended are
// observed (and counted as recoveries when a preemption caused them);
// preempted are the tiers whose outage this pass found a preemption began.
func (m *Metrics) RecordViews(views []TierView, ended []outageEnd, preempted []string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tiers == nil {
		m.tiers = map[string]*tierMetrics{}
	}
	elapsed := 0.0
	if !m.lastViews.IsZero() && now.After(m.lastViews) {
		elapsed = now.Sub(m.lastViews).Seconds()
	}
	m.lastViews = now
	for _, v := range views {
		t := m.tiers[v.Tier]
		if t == nil {
			t = &tierMetrics{seconds: map[string]float64{}, transitions: map[string]uint64{}}
			m.tiers[v.Tier] = t
		}
		if t.state != "" {
			t.seconds[t.state] += elapsed
		}
		if t.state != v.State {
			t.transitions[v.State]++
		}
		if slices.Contains(preempted, v.Tier) {
			t.preemptions++
		}
		t.state, t.expectedBack, t.startToReady, t.serving, t.reason = v.State, v.ExpectedBack, v.StartToReady, v.Serving, v.Reason
	}
	for _, e := range ended {
		t := m.tiers[e.Tier]
		if t == nil {
			continue
		}
		t.outages.observe(e.Duration.Seconds())
		switch e.Cause {
		case ReasonPreempted:
			t.recoveries.observe(e.Duration.Seconds())
		case ReasonReplanning:
			t.replans.observe(e.Duration.Seconds())
		}
	}
}

// RecordOutageStarts sets when each tier's outage under way began, as the
// watcher's tier memory has it (kept in state_dir: a restart of watch
// does not restart the clock); a tier not in starts is routed. Call it
// with each applied pass's memory, after RecordViews (tiers it has not
// seen are left out).
func (m *Metrics) RecordOutageStarts(starts map[string]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for tier, t := range m.tiers {
		t.outageStart = starts[tier]
	}
}

// reasonCodes are the reason label of llm_upstreams_tier_state_info: a
// short word per reason a view gives (the sentences are for people, and
// a refused file's reason goes on with the file's name).
var reasonCodes = []struct{ reason, code string }{
	{ReasonRouted, "routed"}, {ReasonPreempted, "preempted"}, {ReasonQueued, "queued"}, {ReasonStarting, "starting"},
	{ReasonDisabled, "disabled"}, {ReasonHeld, "held"}, {ReasonNotQueued, "not_queued"}, {ReasonRequeued, "requeued"},
	{ReasonStopping, "stopping"}, {ReasonReplanning, "replanning"}, {ReasonRefused, "refused"}, {ReasonUnknown, "unknown"},
	{ReasonNoAnswer, "no_answer"}, {ReasonNoEndpoint, "no_endpoint"},
}

// reasonCode is the metric label of a view's reason; "other" for one no
// constant begins.
func reasonCode(reason string) string {
	for _, rc := range reasonCodes {
		if strings.HasPrefix(reason, rc.reason) {
			return rc.code
		}
	}
	return "other"
}

// RecordRecordError counts a failed write to the availability record.
func (m *Metrics) RecordRecordError() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordErrors++
}

// RecordStale counts stale endpoint files removed and removals that failed.
func (m *Metrics) RecordStale(removed, failed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.staleRemoved += uint64(removed)
	m.staleFailed += uint64(failed)
}

// histogramBuckets' cumulative counts, as client_golang's const
// histograms take them.
func (h histogram) cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(histogramBuckets))
	cum := uint64(0)
	for i, le := range histogramBuckets {
		if h.counts != nil {
			cum += h.counts[i]
		}
		out[le] = cum
	}
	return out
}

// emitter makes const metrics for one Collect, named and described once.
type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) emit(name, help string, typ prometheus.ValueType, v float64, labels ...[2]string) {
	names, values := make([]string, len(labels)), make([]string, len(labels))
	for i, l := range labels {
		names[i], values[i] = l[0], l[1]
	}
	e.ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, names, nil), typ, v, values...)
}

func (e emitter) histogram(name, help, tier string, h histogram) {
	e.ch <- prometheus.MustNewConstHistogram(prometheus.NewDesc(name, help, []string{"tier"}, nil), h.n, h.sum, h.cumulative(), tier)
}

func label(name, value string) [2]string { return [2]string{name, value} }

// collectTiers emits the availability metrics, tiers sorted.
func (m *Metrics) collectTiers(e emitter) {
	e.emit("llm_upstreams_record_errors_total", "Writes to the availability record that failed.", prometheus.CounterValue, float64(m.recordErrors))
	e.emit("llm_upstreams_stale_files_removed_total", "Endpoint files of jobs gone that were removed.", prometheus.CounterValue, float64(m.staleRemoved))
	e.emit("llm_upstreams_stale_file_errors_total", "Stale endpoint files that could not be removed.", prometheus.CounterValue, float64(m.staleFailed))
	states := []string{StateRouted, StateBackup, StateDown}
	for _, tier := range slices.Sorted(maps.Keys(m.tiers)) {
		t := m.tiers[tier]
		tl := label("tier", tier)
		routed := 0.0
		if t.state == StateRouted {
			routed = 1
		}
		e.emit("llm_upstreams_tier_routed", "1 when the tier is routed to its own endpoints, else 0.", prometheus.GaugeValue, routed, tl)
		if t.state != "" {
			e.emit("llm_upstreams_tier_state_info", "1 for each tier's state (routed, backup, down) and the reason its view gives, as a word (routed, preempted, queued, starting, disabled, held, not_queued, requeued, stopping, replanning, refused, unknown, no_answer, no_endpoint, other).",
				prometheus.GaugeValue, 1, tl, label("state", t.state), label("reason", reasonCode(t.reason)))
		}
		start := 0.0
		if !t.outageStart.IsZero() {
			start = float64(t.outageStart.Unix())
		}
		e.emit("llm_upstreams_tier_outage_start_timestamp_seconds", "When the tier's outage under way began: not routed to its own endpoints since (0: routed). Kept across restarts of watch with state_dir.",
			prometheus.GaugeValue, start, tl)
		for _, st := range states {
			e.emit("llm_upstreams_tier_state_seconds_total", "Seconds each tier spent routed, served by its backup, or down (watch's uptime only).",
				prometheus.CounterValue, t.seconds[st], tl, label("state", st))
			e.emit("llm_upstreams_tier_transitions_total", "Times each tier entered a state.", prometheus.CounterValue,
				float64(t.transitions[st]), tl, label("state", st))
		}
		e.emit("llm_upstreams_tier_preemptions_total", "Outages of each tier that a preemption began.", prometheus.CounterValue, float64(t.preemptions), tl)
		e.histogram("llm_upstreams_tier_outage_seconds", "How long each tier was not routed to its own endpoints, per outage.", tier, t.outages)
		e.histogram("llm_upstreams_tier_recovery_seconds", "Time from a preemption to the tier routed again.", tier, t.recoveries)
		e.histogram("llm_upstreams_tier_replan_seconds", "An elastic tier's re-plans (a member taken, lost or back): time from its head's drain to routed again.", tier, t.replans)
		if t.state == StateRouted && t.serving != "" {
			e.emit("llm_upstreams_tier_serving_info", "1 for what a routed elastic tier serves with (its plan: nodes of members, context); absent otherwise.",
				prometheus.GaugeValue, 1, tl, label("serving", t.serving))
		}
		back := 0.0
		if t.expectedBack != nil && t.state != StateRouted {
			back = float64(t.expectedBack.Unix())
		}
		e.emit("llm_upstreams_tier_expected_back_timestamp_seconds", "When a tier that is not routed is expected back (0: routed or unknown).",
			prometheus.GaugeValue, back, tl)
		e.emit("llm_upstreams_tier_start_to_ready_seconds", "Median time from a tier's job start to routed (0: not measured yet).",
			prometheus.GaugeValue, t.startToReady.Seconds(), tl)
	}
}

// Record adds the outcome of one pass.
func (m *Metrics) Record(r Report, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.passes++
	m.lastPassDuration = r.Duration
	m.rejected = len(r.Scan.Rejected)
	m.rejectedTotal += uint64(len(r.Scan.Rejected))
	m.skippedTotal += uint64(r.SkippedFiles)
	if r.SchedulerError != "" {
		m.schedulerErrors++
	}
	if r.Reloaded {
		m.reloads++
	}
	switch {
	case errors.Is(err, ErrRefused):
		m.testFailures++
	case errors.Is(err, ErrNotSwitched):
		m.reloadFailures++
	}
	if err != nil {
		m.passErrors++
		return
	}
	m.lastGoodApply = r.Time
	m.servers = map[string]int{}
	for _, t := range r.Tiers {
		m.servers[t.Tier] = len(t.Servers)
	}
}

// RecordSchedulerCall counts one scheduler call and whether it failed.
func (m *Metrics) RecordSchedulerCall(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.schedulerCalls++
	if err != nil {
		m.schedulerFailed++
	}
}

// RecordHint counts a wake-up of watch by hints (a burst counts once).
func (m *Metrics) RecordHint() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hints++
}

// Describe and Collect make the metrics a Prometheus collector: each scrape
// reads the counts under the lock (an unchecked collector: its series come
// and go with the tiers).
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := emitter{ch}
	counter := func(name, help string, v uint64) { e.emit(name, help, prometheus.CounterValue, float64(v)) }
	counter("llm_upstreams_passes_total", "Passes run (read, decide, render, apply).", m.passes)
	counter("llm_upstreams_pass_errors_total", "Passes that ended in an error.", m.passErrors)
	counter("llm_upstreams_reloads_total", "Successful nginx reloads.", m.reloads)
	counter("llm_upstreams_test_failures_total", "nginx -t failures (candidate files rolled back).", m.testFailures)
	counter("llm_upstreams_reload_failures_total", "nginx reload failures (files rolled back).", m.reloadFailures)
	counter("llm_upstreams_scheduler_errors_total", "Passes made while the scheduler did not answer (nothing dropped).", m.schedulerErrors)
	counter("llm_upstreams_scheduler_calls_total", "Scheduler calls (squeue) made.", m.schedulerCalls)
	counter("llm_upstreams_scheduler_call_failures_total", "Scheduler calls that got no answer.", m.schedulerFailed)
	counter("llm_upstreams_hint_wakeups_total", "Times hints woke watch for a pass (a burst counts once).", m.hints)
	counter("llm_upstreams_rejected_files_total", "Endpoint files rejected, summed over passes.", m.rejectedTotal)
	// Not llm_upstreams_rejected_files: beside the counter above, that
	// name is one OpenMetrics family (a counter's name without _total).
	e.emit("llm_upstreams_last_pass_rejected_files", "Endpoint files rejected by the last pass.", prometheus.GaugeValue, float64(m.rejected))
	counter("llm_upstreams_skipped_files_total", "Endpoint files left unread for max_files, summed over passes.", m.skippedTotal)
	e.emit("llm_upstreams_last_pass_seconds", "Duration of the last pass.", prometheus.GaugeValue, m.lastPassDuration.Seconds())
	var last float64
	if !m.lastGoodApply.IsZero() {
		last = float64(m.lastGoodApply.UnixNano()) / 1e9
	}
	e.emit("llm_upstreams_last_good_apply_timestamp_seconds", "When a pass last left nginx in sync with the endpoints.", prometheus.GaugeValue, last)
	for _, tier := range slices.Sorted(maps.Keys(m.servers)) {
		e.emit("llm_upstreams_endpoints", "Servers routed per tier (a backup tier's servers count for the tier they serve).",
			prometheus.GaugeValue, float64(m.servers[tier]), label("tier", tier))
	}
	m.collectTiers(e)
}

// Gatherer is what the textfile holds and /metrics serves beside the
// process's own figures (ServeMetrics adds them).
func (m *Metrics) Gatherer() prometheus.Gatherer {
	r := prometheus.NewRegistry()
	r.MustRegister(m)
	return r
}

// WritePrometheus writes the metrics in Prometheus' text format.
func (m *Metrics) WritePrometheus(w io.Writer) error { return WriteText(w, m.Gatherer()) }

// WriteText writes what g gathers in Prometheus' text format.
func WriteText(w io.Writer, g prometheus.Gatherer) error {
	fams, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("encode metrics: %w", err)
		}
	}
	return nil
}

// WriteTextfile writes the metrics atomically to a node_exporter textfile.
func (m *Metrics) WriteTextfile(path string) error {
	var b bytes.Buffer
	if err := m.WritePrometheus(&b); err != nil {
		return err
	}
	if err := fsutil.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write metrics textfile: %w", err)
	}
	return nil
}
