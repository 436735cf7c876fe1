package tiers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
)

func TestBackoff(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, backoff(n, 5*time.Second, time.Minute))
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("backoff (-want +got):\n%s", d)
	}
}

// The scheduler is asked when a candidate is new or the answer is old;
// while it does not answer, not before the backoff is over; an answer
// resets the backoff.
func TestSchedStateDue(t *testing.T) {
	const maxAge, limit = 5 * time.Second, 60 * time.Second
	down := errors.New("slurmctld down")
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		at    int      // seconds after t0
		cands []string // the pass's candidates
		call  error    // the outcome if the scheduler is asked (nil: an answer)
	}
	tests := []struct {
		name  string
		steps []step
		want  []bool // due at each step
	}{
		{name: "no candidate, no call", steps: []step{{at: 0}}, want: []bool{false}},
		{name: "answers reused while young and covering", steps: []step{
			{at: 0, cands: []string{"1"}}, {at: 4, cands: []string{"1"}}, {at: 5, cands: []string{"1"}}},
			want: []bool{true, false, true}},
		{name: "a new candidate is asked about at once", steps: []step{
			{at: 0, cands: []string{"1"}}, {at: 1, cands: []string{"1", "2"}}, {at: 2, cands: []string{"2"}}},
			want: []bool{true, true, false}},
		{name: "backoff doubles while down, resets on an answer", steps: []step{
			{at: 0, cands: []string{"1"}, call: down}, {at: 4, cands: []string{"1", "2"}}, {at: 5, cands: []string{"1"}, call: down},
			{at: 14, cands: []string{"1"}}, {at: 15, cands: []string{"1"}}, {at: 16, cands: []string{"1"}}, {at: 19, cands: []string{"1"}}},
			want: []bool{true, false, true, false, true, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s schedState
			var got []bool
			for _, st := range tt.steps {
				due := s.due(st.cands, at(st.at), maxAge)
				got = append(got, due)
				if due {
					s.record(st.cands, map[string]Job{}, st.call, at(st.at), maxAge, limit)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("due (-want +got):\n%s", d)
			}
		})
	}
}

func TestSchedStateView(t *testing.T) {
	var s schedState
	states, pending := s.view([]string{"1"})
	if d := cmp.Diff(endpoints.JobStates{Asked: true, States: map[string]string{}}, states); d != "" || !pending["1"] {
		t.Errorf("never answered: states (-want +got):\n%s pending %v; want 1 pending", d, pending)
	}
	s.record([]string{"1", "2"}, map[string]Job{"1": {State: "RUNNING"}}, nil, t0, time.Second, time.Minute)
	states, pending = s.view([]string{"1", "2", "3"})
	if d := cmp.Diff(endpoints.JobStates{Asked: true, States: map[string]string{"1": "RUNNING"}}, states); d != "" ||
		!cmp.Equal(map[string]bool{"3": true}, pending) {
		t.Errorf("answered about 1 and 2: states (-want +got):\n%s pending %v; want only 3", d, pending)
	}
	down := errors.New("down")
	s.record([]string{"1"}, nil, down, t0, time.Second, time.Minute)
	if states, pending = s.view([]string{"1", "3"}); states.Err != down || len(pending) != 0 {
		t.Errorf("down: states %+v pending %v; want the error and nothing pending", states, pending)
	}
}

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// hungScheduler blocks every call until its context ends, as squeue does
// while slurmctld is down (until its timeout).
type hungScheduler struct{ calls atomic.Int32 }

func (h *hungScheduler) Jobs(ctx context.Context, _ []string) (map[string]Job, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// downScheduler fails every call at once and counts them.
type downScheduler struct{ calls atomic.Int32 }

func (d *downScheduler) Jobs(context.Context, []string) (map[string]Job, error) {
	d.calls.Add(1)
	return nil, errors.New("slurm controller unavailable")
}

// Regression: with slurmctld down, watch held the lock through every
// squeue call (each waiting for its timeout), so the timer's sync waited
// lock_timeout and failed. The scheduler is now asked without the lock.
func TestSyncGetsLockWhileWatchWaitsOnScheduler(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	cfg.Scheduler.Timeout = time.Hour // the call hangs until the test ends
	hung := &hungScheduler{}
	watcher := New(cfg, Options{Scheduler: hung, Now: func() time.Time { return t0 }})
	h := startWatch(t, watcher, nil)
	h.waitFor("the first pass ran", func(Report) bool { return true })
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a pass over the new file", func(r Report) bool { return len(r.Decisions) == 1 })
	waitCond(t, "the watcher's scheduler call started", func() bool { return hung.calls.Load() == 1 })

	syncCfg := cfg
	syncCfg.LockTimeout = 2 * time.Second
	syncer := New(syncCfg, Options{Now: func() time.Time { return t0 }})
	if _, err := syncer.Pass(context.Background()); err != nil {
		t.Fatalf("sync while the watcher waits on the scheduler: %v", err)
	}
}

// While the scheduler does not answer, watch asks it again only after a
// backoff, however many sweeps and file events run meanwhile; those passes
// keep the entries (unverified).
func TestWatchBacksOffWhileSchedulerDown(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = 5 * time.Millisecond
	cfg.Scheduler.MaxAge, cfg.Scheduler.BackoffMax = 5*time.Second, time.Minute
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: t0}
	down := &downScheduler{}
	u := New(cfg, Options{Scheduler: down, Now: clk.Now})
	h := startWatch(t, u, nil)
	unverified := func(r Report) bool {
		return r.SchedulerError != "" && len(r.Decisions) == 1 && r.Decisions[0].Live && r.Decisions[0].Unverified
	}
	for i := 0; i < 30; i++ { // 30 sweeps, the clock standing still
		h.waitFor("a pass with the entry kept unverified", unverified)
	}
	if n := down.calls.Load(); n != 1 {
		t.Errorf("scheduler calls over 30 sweeps within the backoff = %d, want 1", n)
	}
	clk.Add(5 * time.Second) // the first backoff is over
	h.waitFor("a second call", func(Report) bool { return down.calls.Load() == 2 })
	for i := 0; i < 30; i++ {
		h.waitFor("a pass with the entry kept unverified", unverified)
	}
	if n := down.calls.Load(); n != 2 {
		t.Errorf("scheduler calls within the second backoff (10s) = %d, want 2", n)
	}
}

// gatedScheduler answers jobs once release is closed.
type gatedScheduler struct {
	jobs    map[string]Job
	release chan struct{}
}

func (g *gatedScheduler) Jobs(ctx context.Context, ids []string) (map[string]Job, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := map[string]Job{}
	for _, id := range ids {
		if j, ok := g.jobs[id]; ok {
			out[id] = j
		}
	}
	return out, nil
}

// A job the scheduler was not asked about yet is not routed until it
// answers: a file cannot borrow a job in the meantime.
func TestWatchHoldsNewJobUntilChecked(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	g := &gatedScheduler{jobs: map[string]Job{"1": jobOf("fast", "RUNNING")}, release: make(chan struct{})}
	u := New(cfg, Options{Scheduler: g, Now: func() time.Time { return t0 }})
	h := startWatch(t, u, nil)
	h.waitFor("the first pass", func(Report) bool { return true })
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the new job held back", func(r Report) bool {
		return len(r.Decisions) == 1 && !r.Decisions[0].Live && r.Decisions[0].Why == WhyAwaitingScheduler
	})
	close(g.release)
	h.waitFor("the job routed once checked", func(r Report) bool { return len(servers("fast")(r)) == 1 })
}

// waitCond polls cond every millisecond until it holds or 10 s pass.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// A restarted watcher asks the scheduler before its first pass, so what
// is routed stays routed, rather than being held back until it answers.
func TestWatchFirstPassAsksFirst(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	jobs := fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING")}}
	u := New(cfg, Options{Scheduler: jobs, Now: func() time.Time { return t0 }})
	h := startWatch(t, u, nil)
	h.waitFor("the first pass", func(r Report) bool {
		if len(servers("fast")(r)) != 1 {
			t.Errorf("first pass routes %v, want the running job's server", servers("fast")(r))
		}
		return true
	})
}

// countingJobs is a scheduler that fails, counting its calls.
type countingJobs struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (c *countingJobs) Jobs(context.Context, []string) (map[string]Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return nil, c.err
}

// Regression (issue 21): in a controller outage every sync pass took 19 s,
// two scheduler questions one after the other (the tier questions, then
// the check of the ready files' jobs), each waiting out squeue's retries.
// One answer "the controller is down" serves the pass: one call.
func TestSyncInAnOutageAsksOnce(t *testing.T) {
	cfg := testConfig(t)
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	down := errors.New("slurm_load_jobs error: Unable to contact slurm controller")
	sched, q := &countingJobs{err: down}, &fakeQueue{err: down}
	u := New(cfg, Options{Scheduler: sched, Queue: q, Now: func() time.Time { return t0 }})
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	calls := sched.calls + q.calls
	q.mu.Unlock()
	if calls != 1 || rep.SchedulerError == "" {
		t.Errorf("%d scheduler calls (check %d, tier questions %d), scheduler error %q; want 1 call, its error reported",
			calls, sched.calls, q.calls, rep.SchedulerError)
	}
	if len(rep.Decisions) != 1 || !rep.Decisions[0].Live || !rep.Decisions[0].Unverified {
		t.Errorf("the ready file in an outage: %+v; want routed, unverified", rep.Decisions)
	}
}
