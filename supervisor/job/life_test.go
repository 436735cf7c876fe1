package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
	"slurm-llm/supervisor"
)

// fakeTier is a runner that drains at once when asked to stop.
type fakeTier struct {
	once    sync.Once
	stopped chan struct{}
	mu      sync.Mutex
	reqs    []supervisor.StopRequest
}

func newFakeTier() *fakeTier { return &fakeTier{stopped: make(chan struct{})} }

func (f *fakeTier) Run(ctx context.Context) error {
	select {
	case <-f.stopped:
	case <-ctx.Done():
	}
	return nil
}

func (f *fakeTier) Stop(r supervisor.StopRequest) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
	f.once.Do(func() { close(f.stopped) })
}

// scriptedSlurm answers ShowJob from a function of the call count.
type scriptedSlurm struct {
	mu       sync.Mutex
	calls    int
	show     func(call int) slurm.JobInfo
	requeues int
}

func (s *scriptedSlurm) ShowJob(context.Context, string) (slurm.JobInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.show(s.calls), nil
}

func (s *scriptedSlurm) Requeue(context.Context, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requeues++
	return nil
}

func (s *scriptedSlurm) NodesDown(context.Context, []string) (bool, error) { return false, nil }

// newTestLife is a Life with fast timing over sl and its signal channel.
func newTestLife(t *testing.T, sl Slurm) (*Life, chan os.Signal) {
	sigs := make(chan os.Signal, 1)
	return New(testOptions(sl, sigs, filepath.Join(t.TempDir(), "t-7.state"))), sigs
}

// testOptions are the options of a test Life of job 7 with fast timing.
func testOptions(sl Slurm, sigs chan os.Signal, runState string) Options {
	return Options{Alloc: slurm.Allocation{JobID: "7", Nodes: []string{"n1"}}, Slurm: sl, Signals: sigs, Tier: "t",
		RunState: runState, MaxFailedRuns: 3, Log: hclog.NewNullLogger(),
		Timing: Timing{Poll: time.Hour, ClassifyRetry: time.Millisecond, RequeueRetry: time.Millisecond,
			WaitPoll: time.Millisecond, RestartConfirm: time.Millisecond}}
}

// runLife runs l: the first stray tiers each get a step's stop notice once
// running, the next one a SIGTERM to the supervisor (a shutdown). It
// returns the outcome and how many tiers were started.
func runLife(t *testing.T, l *Life, sigs chan os.Signal, stray int) (Outcome, int) {
	t.Helper()
	tiers := 0
	start := func() (Tier, error) {
		tiers++
		if tiers <= stray {
			go l.StepSignalled()
		} else {
			go func() { sigs <- syscall.SIGTERM }()
		}
		return newFakeTier(), nil
	}
	first, _ := start()
	done := make(chan Outcome, 1)
	go func() { done <- l.Run(context.Background(), first, start) }()
	select {
	case out := <-done:
		return out, tiers
	case <-time.After(20 * time.Second):
		t.Fatal("Life.Run did not return")
		return 0, 0
	}
}

// Regression: a SIGTERM to one step while the job runs (an admin's
// `scancel --signal=TERM JOB.STEP`) left the supervisor waiting for Slurm
// with nothing running, holding the allocation idle until the time limit.
// The tier restarts in place, a few times, then the job ends.
func TestStepStoppedRestartsInPlace(t *testing.T) {
	running := func(int) slurm.JobInfo { return slurm.JobInfo{State: slurm.JobRunning, Requeue: true} }
	tests := []struct {
		name      string
		stray     int
		want      Outcome
		wantTiers int
	}{
		{name: "two stray stops: two restarts, then a shutdown", stray: 2, want: Stopped, wantTiers: 3},
		{name: "a fourth stray stop within the window ends the job", stray: 9, want: GaveUp, wantTiers: maxInPlaceRestarts + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, sigs := newTestLife(t, &scriptedSlurm{show: running})
			out, tiers := runLife(t, l, sigs, tt.stray)
			if out != tt.want || tiers != tt.wantTiers {
				t.Errorf("outcome %v after %d tiers, want %v after %d", out, tiers, tt.want, tt.wantTiers)
			}
		})
	}
}

// A preemption Slurm shows only after the step's notice (PreemptTime set
// late) is not taken for a stray stop: the job is requeued, not restarted.
func TestStepStoppedThenPreemptedRequeues(t *testing.T) {
	sl := &scriptedSlurm{}
	sl.show = func(call int) slurm.JobInfo {
		info := slurm.JobInfo{State: slurm.JobRunning, Requeue: true}
		if call > classifyAttempts { // after the first classification's attempts
			info.PreemptTime = time.Unix(100, 0)
		}
		if sl.requeues > 0 {
			info.Restarts = 1
		}
		return info
	}
	l, sigs := newTestLife(t, sl)
	out, tiers := runLife(t, l, sigs, 1)
	if out != Stopped || tiers != 1 || sl.requeues != 1 {
		t.Errorf("outcome %v after %d tiers and %d requeues, want stopped after 1 tier and 1 requeue", out, tiers, sl.requeues)
	}
}

// failingTier gives up at once, as a runner left with too few workers does.
type failingTier struct{}

func (failingTier) Run(context.Context) error   { return supervisor.ErrGaveUp }
func (failingTier) Stop(supervisor.StopRequest) {}

// downSlurm is scriptedSlurm with a node down (or not).
type downSlurm struct {
	*scriptedSlurm
	down bool
}

func (d downSlurm) NodesDown(context.Context, []string) (bool, error) { return d.down, nil }

// A tier that gave up because a node of its job was lost is requeued, to
// come back when Slurm has the nodes; one that gave up for itself ends.
func TestGaveUpWithANodeDownRequeues(t *testing.T) {
	for _, down := range []bool{true, false} {
		t.Run(fmt.Sprintf("node down %v", down), func(t *testing.T) {
			sl := &scriptedSlurm{}
			sl.show = func(int) slurm.JobInfo {
				return slurm.JobInfo{State: slurm.JobRunning, Requeue: true, Restarts: sl.requeues}
			}
			l, _ := newTestLife(t, downSlurm{sl, down})
			out := l.Run(context.Background(), failingTier{}, nil)
			want, requeues := GaveUp, 0
			if down {
				want, requeues = Stopped, 1
			}
			if out != want || sl.requeues != requeues {
				t.Errorf("outcome %v with %d requeues, want %v with %d", out, sl.requeues, want, requeues)
			}
		})
	}
}

// nodeFaultTier gives up on a node of its allocation that could not be
// used, as a runner does whose worker's steps Slurm refuses (N6); with
// ready, only after the tier was ready once.
type nodeFaultTier struct {
	life  *Life
	ready bool
}

func (n nodeFaultTier) Run(context.Context) error {
	if n.ready {
		n.life.Observe(supervisor.Event{Kind: supervisor.EventState, State: supervisor.StateReady})
	}
	return &supervisor.NodeError{Node: "n3", Why: "Slurm refused to create the step there: Requested node configuration is not available",
		Reason: "worker rpc-n3 failed to start 3 times in a row"}
}
func (nodeFaultTier) Stop(supervisor.StopRequest) {}

// Regression (scripts/FACTS-cluster.md N6): a job restarted after a node
// failure got an allocation whose returned node Slurm refused every step
// on; the tier gave up and the job ended, lost until the keeper resubmits
// it. A tier that gives up, never ready, on a node of its allocation that
// Slurm shows up requeues the job for a fresh allocation, as long as
// max_failed_runs allows: runs that keep failing so end the job.
func TestGaveUpOnUnusableNodeRequeues(t *testing.T) {
	tests := []struct {
		name string
		// ready: the tier was ready before it gave up.
		ready bool
		// runs are consecutive runs of the job (restart counts 0, 1, …),
		// each giving up on the node.
		runs         int
		want         []Outcome
		wantRequeues int
	}{
		{name: "never ready: requeued", runs: 1, want: []Outcome{Stopped}, wantRequeues: 1},
		{name: "after it was ready: the job ends", ready: true, runs: 1, want: []Outcome{GaveUp}},
		{name: "max_failed_runs (3) runs in a row: requeued twice, then the job ends", runs: 3,
			want: []Outcome{Stopped, Stopped, GaveUp}, wantRequeues: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sl := &scriptedSlurm{}
			sl.show = func(int) slurm.JobInfo {
				return slurm.JobInfo{State: slurm.JobRunning, Requeue: true, Restarts: sl.requeues}
			}
			state := filepath.Join(t.TempDir(), "t-7.state")
			var got []Outcome
			for run := 0; run < tt.runs; run++ {
				opts := testOptions(sl, make(chan os.Signal, 1), state)
				opts.Alloc.RestartCount = run
				l := New(opts)
				got = append(got, l.Run(context.Background(), nodeFaultTier{life: l, ready: tt.ready}, nil))
			}
			if d := cmp.Diff(tt.want, got); d != "" || sl.requeues != tt.wantRequeues {
				t.Errorf("%d requeues, want %d; outcomes (-want +got):\n%s", sl.requeues, tt.wantRequeues, d)
			}
		})
	}
}

// flakySlurm is scriptedSlurm whose NodesDown fails errs times, then says
// a node is down; asked counts the questions.
type flakySlurm struct {
	*scriptedSlurm
	errs  int
	asked *int
}

func (f flakySlurm) NodesDown(context.Context, []string) (bool, error) {
	if *f.asked++; *f.asked <= f.errs {
		return false, errors.New("slurm_load_node error: Socket timed out on send/recv operation")
	}
	return true, nil
}

// Regression (issue 30, lower): afterGiveUp dropped NodesDown's error: a
// job whose tier gave up because a node was lost ended as unknown, with
// nothing logged, when Slurm did not answer once (a node that just failed
// is when slurmctld is slowest). Slurm is asked again; when it never
// answers, the job ends and the log says why.
func TestNodesDownUnansweredIsAskedAgainAndLogged(t *testing.T) {
	tests := []struct {
		name         string
		errs         int
		want         Outcome
		wantRequeues int
		wantLog      string
	}{
		{name: "no answer once: asked again, requeued", errs: 1, want: Stopped, wantRequeues: 1, wantLog: "asking again"},
		{name: "never an answer: the job ends, and the log says why", errs: 100, want: GaveUp,
			wantLog: "cannot ask Slurm whether a node of the job is down: ending the job"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sl := &scriptedSlurm{}
			sl.show = func(int) slurm.JobInfo {
				return slurm.JobInfo{State: slurm.JobRunning, Requeue: true, Restarts: sl.requeues}
			}
			asked := 0
			var buf bytes.Buffer
			opts := testOptions(flakySlurm{sl, tt.errs, &asked}, make(chan os.Signal, 1), filepath.Join(t.TempDir(), "t-7.state"))
			opts.Log = hclog.New(&hclog.LoggerOptions{Output: &buf})
			out := New(opts).Run(context.Background(), failingTier{}, nil)
			if out != tt.want || sl.requeues != tt.wantRequeues || !strings.Contains(buf.String(), tt.wantLog) {
				t.Errorf("outcome %v, %d requeues, NodesDown asked %d times, log %q; want %v, %d requeues, a log line with %q",
					out, sl.requeues, asked, buf.String(), tt.want, tt.wantRequeues, tt.wantLog)
			}
		})
	}
}
