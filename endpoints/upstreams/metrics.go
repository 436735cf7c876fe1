package upstreams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

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
		t.state, t.expectedBack, t.startToReady, t.serving = v.State, v.ExpectedBack, v.StartToReady, v.Serving
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

// writeTierMetrics writes the availability metrics, tiers sorted.
func (m *Metrics) writeTierMetrics(b *bytes.Buffer) {
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	counter("llm_upstreams_record_errors_total", "Writes to the availability record that failed.", m.recordErrors)
	counter("llm_upstreams_stale_files_removed_total", "Endpoint files of jobs gone that were removed.", m.staleRemoved)
	counter("llm_upstreams_stale_file_errors_total", "Stale endpoint files that could not be removed.", m.staleFailed)
	tiers := slices.Sorted(maps.Keys(m.tiers))
	states := []string{StateRouted, StateBackup, StateDown}
	header := func(name, typ, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	header("llm_upstreams_tier_routed", "gauge", "1 when the tier is routed to its own endpoints, else 0.")
	for _, tier := range tiers {
		v := 0
		if m.tiers[tier].state == StateRouted {
			v = 1
		}
		fmt.Fprintf(b, "llm_upstreams_tier_routed{tier=%q} %d\n", tier, v)
	}
	header("llm_upstreams_tier_state_seconds_total", "counter", "Seconds each tier spent routed, served by its backup, or down (watch's uptime only).")
	for _, tier := range tiers {
		for _, st := range states {
			fmt.Fprintf(b, "llm_upstreams_tier_state_seconds_total{tier=%q,state=%q} %s\n", tier, st,
				strconv.FormatFloat(m.tiers[tier].seconds[st], 'f', 3, 64))
		}
	}
	header("llm_upstreams_tier_transitions_total", "counter", "Times each tier entered a state.")
	for _, tier := range tiers {
		for _, st := range states {
			fmt.Fprintf(b, "llm_upstreams_tier_transitions_total{tier=%q,state=%q} %d\n", tier, st, m.tiers[tier].transitions[st])
		}
	}
	header("llm_upstreams_tier_preemptions_total", "counter", "Outages of each tier that a preemption began.")
	for _, tier := range tiers {
		fmt.Fprintf(b, "llm_upstreams_tier_preemptions_total{tier=%q} %d\n", tier, m.tiers[tier].preemptions)
	}
	writeHistogram(b, "llm_upstreams_tier_outage_seconds", "How long each tier was not routed to its own endpoints, per outage.",
		tiers, func(t string) histogram { return m.tiers[t].outages })
	writeHistogram(b, "llm_upstreams_tier_recovery_seconds", "Time from a preemption to the tier routed again.",
		tiers, func(t string) histogram { return m.tiers[t].recoveries })
	writeHistogram(b, "llm_upstreams_tier_replan_seconds", "An elastic tier's re-plans (a member taken, lost or back): time from its head's drain to routed again.",
		tiers, func(t string) histogram { return m.tiers[t].replans })
	header("llm_upstreams_tier_serving_info", "gauge", "1 for what a routed elastic tier serves with (its plan: nodes of members, context); absent otherwise.")
	for _, tier := range tiers {
		if t := m.tiers[tier]; t.state == StateRouted && t.serving != "" {
			fmt.Fprintf(b, "llm_upstreams_tier_serving_info{tier=%q,serving=%q} 1\n", tier, t.serving)
		}
	}
	header("llm_upstreams_tier_expected_back_timestamp_seconds", "gauge", "When a tier that is not routed is expected back (0: routed or unknown).")
	for _, tier := range tiers {
		v := 0.0
		if e := m.tiers[tier].expectedBack; e != nil && m.tiers[tier].state != StateRouted {
			v = float64(e.Unix())
		}
		fmt.Fprintf(b, "llm_upstreams_tier_expected_back_timestamp_seconds{tier=%q} %s\n", tier, strconv.FormatFloat(v, 'f', -1, 64))
	}
	header("llm_upstreams_tier_start_to_ready_seconds", "gauge", "Median time from a tier's job start to routed (0: not measured yet).")
	for _, tier := range tiers {
		fmt.Fprintf(b, "llm_upstreams_tier_start_to_ready_seconds{tier=%q} %s\n", tier,
			strconv.FormatFloat(m.tiers[tier].startToReady.Seconds(), 'f', -1, 64))
	}
}

// writeHistogram writes one histogram per tier in the text format.
func writeHistogram(b *bytes.Buffer, name, help string, tiers []string, get func(string) histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for _, tier := range tiers {
		h := get(tier)
		cum := uint64(0)
		for i, le := range histogramBuckets {
			if h.counts != nil {
				cum += h.counts[i]
			}
			fmt.Fprintf(b, "%s_bucket{tier=%q,le=%q} %d\n", name, tier, strconv.FormatFloat(le, 'f', -1, 64), cum)
		}
		fmt.Fprintf(b, "%s_bucket{tier=%q,le=\"+Inf\"} %d\n", name, tier, h.n)
		fmt.Fprintf(b, "%s_sum{tier=%q} %s\n%s_count{tier=%q} %d\n", name, tier, strconv.FormatFloat(h.sum, 'f', 3, 64), name, tier, h.n)
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
	if r.SchedulerError != "" {
		m.schedulerErrors++
	}
	if r.Reloaded {
		m.reloads++
	}
	switch {
	case errors.Is(err, ErrTestFailed):
		m.testFailures++
	case errors.Is(err, ErrReloadFailed):
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

// WritePrometheus writes the metrics in the Prometheus text format, sorted.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b bytes.Buffer
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'f', -1, 64))
	}
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
	gauge("llm_upstreams_rejected_files", "Endpoint files rejected by the last pass.", float64(m.rejected))
	gauge("llm_upstreams_last_pass_seconds", "Duration of the last pass.", m.lastPassDuration.Seconds())
	var last float64
	if !m.lastGoodApply.IsZero() {
		last = float64(m.lastGoodApply.UnixNano()) / 1e9
	}
	gauge("llm_upstreams_last_good_apply_timestamp_seconds", "When a pass last left nginx in sync with the endpoints.", last)
	name := "llm_upstreams_endpoints"
	fmt.Fprintf(&b, "# HELP %s Servers routed per tier (a backup tier's servers count for the tier they serve).\n# TYPE %s gauge\n", name, name)
	for _, tier := range slices.Sorted(maps.Keys(m.servers)) {
		fmt.Fprintf(&b, "%s{tier=%q} %d\n", name, tier, m.servers[tier])
	}
	m.writeTierMetrics(&b)
	_, err := w.Write(b.Bytes())
	return err
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

// PrometheusWriter writes metrics in Prometheus' text format: the
// watcher's *Metrics, and the keeper's.
type PrometheusWriter interface {
	WritePrometheus(w io.Writer) error
}

// ServeMetrics serves GET /metrics on addr until ctx ends.
func ServeMetrics(ctx context.Context, addr string, m PrometheusWriter) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_ = m.WritePrometheus(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics serve: %w", err)
	}
	return nil
}
