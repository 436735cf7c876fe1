package tiers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

// fakeQueue answers the tier questions from memory; safe for the watch's
// background goroutine.
type fakeQueue struct {
	mu      sync.Mutex
	jobs    []slurm.QueuedJob // by name
	running []slurm.QueuedJob
	parts   map[string]slurm.Partition
	err     error
	calls   int
}

func (f *fakeQueue) Queue(_ context.Context, q slurm.QueueQuery) ([]slurm.QueuedJob, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	if len(q.States) > 0 {
		return append([]slurm.QueuedJob(nil), f.running...), nil
	}
	var out []slurm.QueuedJob
	for _, j := range f.jobs {
		for _, n := range q.Names {
			if j.Name == n {
				out = append(out, j)
			}
		}
	}
	return out, nil
}

func (f *fakeQueue) Partitions(context.Context) (map[string]slurm.Partition, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return f.parts, nil
}

func (f *fakeQueue) set(change func(*fakeQueue)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func countCalls(calls []string, kind string) int {
	n := 0
	for _, c := range calls {
		if c == kind {
			n++
		}
	}
	return n
}

// nowEndpoint is tier fast's job 1 in state st, restart n, started now.
func nowEndpoint(st endpoints.State, n int, reason string) endpoints.Endpoint {
	now := time.Now().UTC()
	e := testEndpoint("fast", "1", "10.0.0.1", 8080)
	e.State, e.RestartCount, e.Reason = st, n, reason
	e.StartedAt, e.Heartbeat, e.LeaseExpires = now, now, now.Add(time.Minute)
	return e
}

func viewOf(r Report, tier string) TierView {
	for _, v := range r.Views {
		if v.Tier == tier {
			return v
		}
	}
	return TierView{}
}

// Watch records each change of a tier's state and reason, measures its
// start-to-routed time at each new run, and counts the preemption and the
// recovery: routed, preempted (a draining file says so), routed again.
func TestWatchRecordsAvailability(t *testing.T) {
	cfg := testConfig(t)
	cfg.StateDir = t.TempDir()
	q := &fakeQueue{jobs: []slurm.QueuedJob{{ID: "1", State: slurm.JobRunning, Reason: "None", Priority: 1, UID: me,
		Partition: "gpu_ai", NodeList: "node1", Name: "llm-fast", Start: time.Now()}}}
	m := &Metrics{}
	u := New(cfg, Options{Queue: q, Metrics: m,
		Resolver: fakeResolver{}})
	h := startWatch(t, u, nil)
	state := func(want, reason string) func(Report) bool {
		return func(r Report) bool {
			v := viewOf(r, "fast")
			return v.State == want && (reason == "" || v.Reason == reason)
		}
	}
	h.waitFor("fast down, starting (its job runs, no file yet)", state(StateDown, ReasonStarting))
	write := func(e endpoints.Endpoint) {
		t.Helper()
		if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
			t.Fatal(err)
		}
	}
	write(nowEndpoint(endpoints.StateReady, 0, ""))
	h.waitFor("fast routed", state(StateRouted, ""))
	write(nowEndpoint(endpoints.StateDraining, 0, "preempted"))
	h.waitFor("fast down, preempted", state(StateDown, ReasonPreempted))
	write(nowEndpoint(endpoints.StateReady, 1, ""))
	h.waitFor("fast routed again", state(StateRouted, ""))

	events, bad, err := ReadRecord(cfg.StateDir)
	if err != nil || bad != 0 {
		t.Fatalf("record: %v, %d bad lines", err, bad)
	}
	var got []string
	for _, ev := range events {
		switch {
		case ev.Event != EventState:
			got = append(got, ev.Event)
		case ev.Tier == "fast":
			got = append(got, ev.State+": "+ev.Reason)
		}
	}
	want := []string{"start", "down: " + ReasonStarting, "routed: routed", "down: " + ReasonPreempted, "routed: routed"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("record (-want +got):\n%s", d)
	}
	mem, err := loadMem(cfg.StateDir)
	if err != nil || len(mem["fast"].Ready) != 2 {
		t.Errorf("tier memory %+v (%v): want two start-to-routed samples", mem["fast"], err)
	}
	var b strings.Builder
	_ = m.WritePrometheus(&b)
	for _, line := range []string{`llm_upstreams_tier_preemptions_total{tier="fast"} 1`, `llm_upstreams_tier_recovery_seconds_count{tier="fast"} 1`,
		`llm_upstreams_tier_state_info{reason="routed",state="routed",tier="fast"} 1`, `llm_upstreams_tier_outage_start_timestamp_seconds{tier="fast"} 0`} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// While the scheduler check gets no answer, the tier questions are not
// asked (one backing-off stream of squeue calls during an outage, not two)
// and the views say the scheduler is unknown rather than repeat the last
// answer.
func TestTierQuestionsWaitForTheSchedulerCheck(t *testing.T) {
	cfg := testConfig(t)
	cfg.StateDir = t.TempDir()
	q := &fakeQueue{jobs: []slurm.QueuedJob{{ID: "7", State: slurm.JobPending, Reason: "Priority", Priority: 1,
		UID: me, Partition: "gpu_ai", Name: "llm-fast", Start: t0.Add(10 * time.Minute)}}}
	now := t0
	u := New(cfg, Options{Queue: q, Now: func() time.Time { return now }})
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := q.calls
	u.sched.record(nil, nil, slurm.ErrUnavailable, now, time.Second, 4*time.Second)
	now = t0.Add(time.Minute) // tier questions long due
	if _, _, _, due := u.tiersDue(now); due {
		t.Errorf("tier questions due while the scheduler check fails")
	}
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if q.calls != calls {
		t.Errorf("%d tier questions asked while the scheduler check fails, want 0", q.calls-calls)
	}
	if v := rep.Views[0]; v.Reason != ReasonUnknown {
		t.Errorf("view while the scheduler check fails: reason %q, want %q", v.Reason, ReasonUnknown)
	}
}

// A file that begins to drain without saying why ("shutdown", at its
// supervisor's notice) makes the next pass ask Slurm at once rather than
// at the next sweep: its answer tells a preemption from an end (issue 21:
// the 503 said "stopping" for up to a sweep before "preempted"). Once per
// run.
func TestADrainAsksSlurmAtOnce(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	q := &fakeQueue{}
	now := t0
	u := New(cfg, Options{Queue: q, Now: func() time.Time { return now }})
	pass := func() int {
		t.Helper()
		if _, err := u.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.calls
	}
	first := pass()
	e := testEndpoint("fast", "7", "10.0.0.1", 8080)
	e.State, e.Reason, e.RunID = endpoints.StateDraining, "shutdown", "0123456789abcdef"
	if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(10 * time.Millisecond)
	seen := pass() // sees the drain; the answer it has is fresh
	now = t0.Add(20 * time.Millisecond)
	asked := pass()
	now = t0.Add(30 * time.Millisecond)
	again := pass()
	if seen != first || asked == first || again != asked {
		t.Errorf("tier questions after passes: %d, %d (the drain seen), %d, %d; want the pass after the drain to ask once",
			first, seen, asked, again)
	}
}
