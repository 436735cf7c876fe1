package supervisor

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
)

// drainInFlight is the in-flight wait of rigPlan's split for the fake
// launcher (no stop margin): 25s - 5s (head) - 5s (workers) - 2s (kill).
const drainInFlight = 13 * time.Second

func TestFakeRigSplit(t *testing.T) {
	if got := rigPlan(t, 2).Split(0).InFlight; got != drainInFlight {
		t.Fatalf("rigPlan's in-flight wait = %s, want %s", got, drainInFlight)
	}
}

// Regression: one failed in-flight check (a 503 from a head busy under
// load) ended the drain at once and cut every stream, with most of the
// budget left. A head that cannot say may be busy: the drain asks again.
func TestDrainWaitsThroughFailedInFlightChecks(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 2))
	g.ready()
	g.head.setMetrics(2) // busy: the drain must not end at its first look
	g.r.Stop(StopRequest{Reason: ReasonPreempted})
	g.waitEvent("draining", state(StateDraining))
	// While draining only the drain reads /metrics (no health polls).
	g.head.setMetrics(-503, -503, -500, 2, 2, 0)
	draining := g.clk.Now()
	seen := g.advanceUntil("stopped", state(StateStopped), 250*time.Millisecond)
	var stopped time.Time
	for _, e := range seen {
		if e.Kind == EventState && e.State == StateStopped {
			stopped = e.Time
		}
	}
	if asked := g.head.metricsAsked(); asked < 6 {
		t.Errorf("/metrics asked %d times while draining, want 6 (3 failures, 2 busy, then idle)", asked)
	}
	if took := stopped.Sub(draining); took < 5*250*time.Millisecond || took >= drainInFlight {
		t.Errorf("drain took %s, want it to end when the head is idle (≥ 5 polls), before the budget", took)
	}
}

// The budget counts from the stop notice, or from Slurm's PreemptTime when
// a later request brings it: requests in flight are waited for until then,
// not from whenever the runner took the request.
func TestDrainDeadlineCountsFromNotice(t *testing.T) {
	tests := []struct {
		name     string
		first    time.Duration // Since of the first request, from now (0: none)
		preempt  time.Duration // Since of a second request, from now (0: none)
		wantStop time.Duration // when the drain gives up, from the first request
	}{
		{name: "from the request", wantStop: drainInFlight},
		{name: "from the notice", first: -4 * time.Second, wantStop: drainInFlight - 4*time.Second},
		{name: "from PreemptTime, told during the drain", preempt: -6 * time.Second, wantStop: drainInFlight - 6*time.Second},
		{name: "a later PreemptTime never extends it", first: -4 * time.Second, preempt: -time.Second, wantStop: drainInFlight - 4*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeRig(t, rigPlan(t, 2))
			g.ready()
			g.head.setMetrics(1) // never idle
			now := g.clk.Now()
			req := StopRequest{Reason: ReasonShutdown}
			if tt.first != 0 {
				req.Since = now.Add(tt.first)
			}
			g.r.Stop(req)
			g.waitEvent("draining", state(StateDraining))
			if tt.preempt != 0 {
				g.r.Stop(StopRequest{Reason: ReasonPreempted, Since: now.Add(tt.preempt)})
			}
			seen := g.advanceUntil("stopped", state(StateStopped), 100*time.Millisecond)
			var gaveUp time.Time
			for _, e := range seen {
				if e.Kind == EventStopping && e.Process == "head" {
					gaveUp = e.Time
				}
			}
			if gaveUp.IsZero() {
				gaveUp = seen[len(seen)-1].Time
			}
			if got := gaveUp.Sub(now); got < tt.wantStop || got > tt.wantStop+100*time.Millisecond {
				t.Errorf("drain gave up %s after the request, want %s", got, tt.wantStop)
			}
		})
	}
}

// Regression: after a worker died the head was stopped gracefully, which
// cost its stop grace of the recovery; it can serve nothing (its next
// request aborts), so it is killed at once.
func TestWorkerDeathKillsHead(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 2))
	g.ready()
	head := g.l.last("head")
	g.l.last("rpc-n2").end("exited", ExitResult{Code: -1, Signal: 9})
	g.waitEvent("head stopping", func(e Event) bool { return e.Kind == EventStopping && e.Process == "head" })
	g.waitEvent("head exited", func(e Event) bool { return e.Kind == EventExited && e.Process == "head" })
	if how := head.how(); how != "killed" {
		t.Errorf("the head was %s, want killed", how)
	}
	g.advanceUntil("ready again", state(StateReady), 100*time.Millisecond)
}

// The head's requests in flight are published while it serves, and
// unknown (absent) when it cannot say.
func TestInFlightPublished(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 1))
	g.ready()
	inFlight := func() *int {
		e, _ := g.file()
		return e.InFlight
	}
	g.head.setMetrics(3)
	g.advanceFor("3 in flight published", func() bool {
		n := inFlight()
		return n != nil && *n == 3
	}, 500*time.Millisecond)
	g.head.setMetrics(-503)
	g.advanceFor("in flight unknown", func() bool { return inFlight() == nil }, 500*time.Millisecond)
}

// An extra replica (Options.IdleExit) ends after serving that long with
// nothing in flight: busy time does not count, the endpoint goes draining
// with reason "idle", and the run ends only after the unroute wait, and
// only once a request that came meanwhile is done.
func TestIdleExit(t *testing.T) {
	const idle = time.Minute
	g := newFakeRig(t, rigPlan(t, 1), func(o *Options) { o.IdleExit, o.IdleUnroute = idle, 5*time.Second })
	g.ready()
	start := g.clk.Now()
	g.head.setMetrics(0)
	g.advanceFor("idle half a minute", func() bool { return g.clk.Now().Sub(start) >= idle/2 }, time.Second)
	g.head.setMetrics(2) // busy: the idle clock restarts
	g.advanceFor("busy a while", func() bool { return g.clk.Now().Sub(start) >= idle }, time.Second)
	busyEnd := g.clk.Now()
	g.head.setMetrics(0)
	g.advanceUntil("draining after idle_exit", state(StateDraining), time.Second)
	if took := g.clk.Now().Sub(busyEnd); took < idle || took > idle+3*time.Second {
		t.Errorf("drained %s after the last request, want about %s", took, idle)
	}
	drainAt := g.clk.Now()
	g.advanceFor("endpoint draining, reason idle", func() bool {
		e, ok := g.file()
		return ok && e.State == endpoints.StateDraining && e.Reason == string(ReasonIdle)
	}, 100*time.Millisecond)
	g.head.setMetrics(1) // nginx sent one more before it unrouted
	g.advanceFor("the late request runs past the unroute wait", func() bool { return g.clk.Now().Sub(drainAt) >= 8*time.Second }, 500*time.Millisecond)
	if g.l.last("head").how() != "" {
		t.Fatalf("head stopped with a request in flight (%s)", g.l.last("head").how())
	}
	g.head.setMetrics(0)
	g.advanceUntil("stopped once it is done", state(StateStopped), 500*time.Millisecond)
}

// Without IdleExit, an idle tier never stops.
func TestNoIdleExitByDefault(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 1))
	g.ready()
	g.head.setMetrics(0)
	start := g.clk.Now()
	g.advanceFor("ten minutes idle", func() bool { return g.clk.Now().Sub(start) >= 10*time.Minute }, time.Second)
	for {
		select {
		case e := <-g.events:
			if e.Kind == EventState && (e.State == StateDraining || e.State == StateStopped) {
				t.Fatalf("idle without IdleExit: went %s (%s)", e.State, e.Reason)
			}
			continue
		default:
		}
		break
	}
	if h := g.l.last("head"); h.how() != "" {
		t.Errorf("head ended (%s) while idle without IdleExit", h.how())
	}
}

// Regression: every run of a job writes the same endpoint path, and a stale
// run (its node cut off) overwrote and then removed the new run's file. A
// run finding a newer run's file leaves it alone and stops itself.
func TestStaleRunLeavesNewerFileAlone(t *testing.T) {
	plan := rigPlan(t, 1)
	newer := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: plan.Tier, JobID: plan.JobID, RestartCount: 1,
		Host: "10.0.0.9", Port: 8080, State: endpoints.StateReady, Models: []string{}, Node: "n9", PID: 77,
		StartedAt: time.Now(), Heartbeat: time.Now(), LeaseExpires: time.Now().Add(time.Minute), RunID: "ffffffffffffffff"}
	if err := endpoints.Write(plan.EndpointDir, newer); err != nil {
		t.Fatal(err)
	}
	g := newFakeRig(t, plan) // restart count 0: older
	g.waitEvent("stopped", func(e Event) bool { return e.Kind == EventState && e.State == StateStopped })
	got, ok := g.file()
	if !ok {
		t.Fatal("the newer run's file was removed")
	}
	if d := cmp.Diff(newer.RunID, got.RunID); d != "" {
		t.Errorf("endpoint file run id (-want +got):\n%s", d)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("Run = %v, want nil (an ordered stop)", err)
		}
		g.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// An older restart's file is replaced; the run's own file is removed at the end.
func TestRunReplacesOlderFileAndRemovesItsOwn(t *testing.T) {
	plan := rigPlan(t, 1)
	plan.RestartCount = 2
	older := endpoints.Endpoint{Schema: 1, Tier: plan.Tier, JobID: plan.JobID, RestartCount: 1,
		Host: "10.0.0.9", Port: 8080, State: endpoints.StateReady, Models: []string{}, Node: "n9", PID: 77,
		StartedAt: time.Now(), Heartbeat: time.Now(), LeaseExpires: time.Now().Add(time.Minute)}
	if err := endpoints.Write(plan.EndpointDir, older); err != nil {
		t.Fatal(err)
	}
	g := newFakeRig(t, plan)
	g.ready()
	if err := g.r.pub.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e, _ := g.file(); e.RunID != "0123456789abcdef" || e.RestartCount != 2 {
		t.Errorf("endpoint file = run %q restart %d, want this run's", e.RunID, e.RestartCount)
	}
	g.r.Stop(StopRequest{Reason: ReasonShutdown, SkipDrain: true})
	g.waitEvent("stopped", state(StateStopped))
	if _, ok := g.file(); ok {
		t.Error("the run's own endpoint file is left after an ordered stop")
	}
}

// Regression: the head was asked through the job's proxy: sbatch exports
// the submitter's http_proxy into the job (Go's default transport reads
// it), and health checks through it failed until the load timeout.
func TestHeadClientUsesNoProxy(t *testing.T) {
	tr, ok := NewHeadClient().Transport.(*http.Transport)
	if !ok {
		t.Fatalf("head client transport is %T, want *http.Transport", NewHeadClient().Transport)
	}
	if tr.Proxy != nil {
		t.Error("the head client's transport has a Proxy function; heads must be asked directly")
	}
	if c := withDefaultsOrFatal(t).HTTPClient; c.Transport.(*http.Transport).Proxy != nil {
		t.Error("the runner's default HTTP client uses a proxy")
	}
}

func withDefaultsOrFatal(t *testing.T) Options {
	o, err := withDefaults(Options{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A head whose worker's link went silent blocks forever in llama.cpp's RPC
// while /health stays 200 (slurm-facts 26): only the lack of progress
// shows it. Busy without progress for timeouts.stall, it is killed and
// restarted; progress, idleness or a router without counters never is.
func TestStalledHead(t *testing.T) {
	const stall = 30 * time.Second // rigPlan's
	tests := []struct {
		name     string
		metrics  []int // /metrics answers (in flight; negative: HTTP status)
		progress bool  // the work counter moves at every reading
		noWork   bool  // /metrics has no work counter (a router)
		wantHung bool
	}{
		{name: "busy, no progress", metrics: []int{1}, wantHung: true},
		{name: "busy, then /metrics fails", metrics: []int{1, 1, -503}, wantHung: true},
		{name: "busy and progressing", metrics: []int{1}, progress: true},
		{name: "idle", metrics: []int{0}},
		{name: "idle, /metrics failing", metrics: []int{-503}},
		{name: "busy, no counters to read progress from", metrics: []int{1}, noWork: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeRig(t, rigPlan(t, 2))
			g.ready()
			head, worker := g.l.last("head"), g.l.last("rpc-n1")
			if tt.noWork {
				g.head.setWork(-1)
			}
			g.head.setMetrics(tt.metrics...)
			start := g.clk.Now()
			work := 0
			for g.clk.Now().Sub(start) < 3*stall && head.how() == "" {
				if tt.progress {
					work += 10
					g.head.setWork(work)
				}
				g.clk.Advance(time.Second)
				g.settle()
			}
			if hung := head.how() == "killed"; hung != tt.wantHung {
				t.Fatalf("head killed as hung = %v after %s, want %v", hung, g.clk.Now().Sub(start), tt.wantHung)
			}
			if !tt.wantHung {
				return
			}
			if took := g.clk.Now().Sub(start); took < stall || took > stall+3*time.Second {
				t.Errorf("hung head killed after %s, want about timeouts.stall (%s)", took, stall)
			}
			g.head.setMetrics(0)
			g.advanceUntil("ready again with a new head", state(StateReady), 100*time.Millisecond)
			if g.l.last("head") == head {
				t.Error("no new head was started")
			}
			// A worker cut off from the hung head keeps its dead connection
			// for ever (real rpc-server, no keepalive): workers restart too.
			if g.l.last("rpc-n1") == worker || worker.how() != "stopped" {
				t.Errorf("worker rpc-n1 was not restarted after the hung head (ended %q)", worker.how())
			}
		})
	}
}

// Real llama-server, unable to connect to one of its --rpc workers, logs
// "Failed to connect to H:P" and serves without it, on fewer devices than
// planned (measured: notes Q2). The head is replaced and the worker
// counts a failed start.
func TestHeadServingWithoutAWorkerIsReplaced(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 2))
	g.ready()
	head, worker := g.l.last("head"), g.l.last("rpc-n2")
	head.unreachable <- "10.0.0.3:0" // rpc-n2's address (rigPlan: no port)
	g.advanceUntil("ready again", state(StateReady), 100*time.Millisecond)
	if head.how() != "killed" {
		t.Errorf("the head was %q, want killed", head.how())
	}
	if worker.how() != "stopped" || g.l.last("rpc-n2") == worker {
		t.Errorf("worker rpc-n2 was not restarted (ended %q)", worker.how())
	}
	if g.l.last("rpc-n1").how() != "" {
		t.Error("the reachable worker was stopped")
	}
}

// The controller's inotify cannot see a compute node's writes (NFS): after
// each endpoint write and removal the runner sends its hint listener a
// datagram, "<tier> <job>\n".
func TestRunnerSendsHints(t *testing.T) {
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	plan := rigPlan(t, 1)
	plan.HintAddr = ln.LocalAddr().String()
	g := newFakeRig(t, plan)
	g.ready()
	buf := make([]byte, 64)
	_ = ln.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _, err := ln.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no hint after the endpoint writes: %v", err)
	}
	if got := string(buf[:n]); got != "t 9\n" {
		t.Errorf("hint = %q, want %q", got, "t 9\n")
	}
}
