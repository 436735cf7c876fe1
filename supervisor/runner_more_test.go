package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/health"
	"slurm-llm/supervisor/tier"
)

// A worker without a ready pattern is seen ready by the startup port probe.
func TestRunnerWorkerReadyByProbe(t *testing.T) {
	tr := newTier(t, 2)
	plan := tr.plan(tr.nodes)
	for i := range plan.Workers {
		plan.Workers[i].ReadyPattern = ""
	}
	rn := startRunner(t, plan, Options{})
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	n := rn.rec.count(func(e Event) bool { return e.Kind == EventReady && e.Reason == "port accepts connections" })
	if n != 2 {
		t.Errorf("%d workers seen ready by the port probe, want 2", n)
	}
}

// A head whose /health never answers fails its load timeout again and
// again until the failure budget is spent.
func TestRunnerHeadLoadTimeout(t *testing.T) {
	tr := newTier(t, 1)
	tr.headArgs = append(tr.headArgs, "--fake-hang-health")
	tr.timeouts.Load, tr.timeouts.HealthTimeout = 300*time.Millisecond, 100*time.Millisecond
	tr.restart.MaxFailures = 2
	rn := startRunner(t, tr.plan(tr.nodes), Options{})
	err := rn.wait(t)
	if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "not ready after 300ms") {
		t.Fatalf("Run = %v, want ErrGaveUp naming the load timeout", err)
	}
}

// A worker that never says it is ready and never listens fails its start
// timeout; with min_workers allowing it, its node is dropped.
func TestRunnerWorkerStartTimeout(t *testing.T) {
	tr := newTier(t, 2)
	tr.minWorkers = 1
	tr.restart.WorkerStartFailures = 2
	// Long enough for the good worker (a real process) to start on a busy
	// machine: 300 ms failed it too under load, and no node was left.
	tr.timeouts.WorkerStart = 2 * time.Second
	tr.workerArgs["node2"] = []string{"--fake-startup-delay", "1h"}
	rn := startRunner(t, tr.plan(tr.nodes), Options{Replan: func(w []string) (*tier.Plan, error) { return tr.plan(w), nil }})
	until(t, "endpoint ready", func() bool { return endpointState(t, rn.plan) == endpoints.StateReady })
	if n := rn.rec.count(func(e Event) bool { return e.Kind == EventDropped && e.Process == "rpc-node2" }); n != 1 {
		t.Errorf("rpc-node2 dropped %d times, want 1", n)
	}
	log, err := os.ReadFile(rn.plan.Head.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	starts := strings.Split(string(log), "start head: ")
	last := starts[len(starts)-1]
	last = last[:strings.IndexByte(last, '\n')]
	_, rpc, _ := strings.Cut(last, "--rpc ")
	if f := strings.Fields(rpc); len(f) == 0 || len(strings.Split(f[0], ",")) != 1 {
		t.Errorf("the last head start does not name exactly one worker: %s", last)
	}
}

// A worker whose node does not answer its startup probes at all (its
// link is cut: no refusal, no reply) is dropped once silentAfter has
// passed, long before worker_start runs out: restarting it cannot help.
// One that refuses (up, not listening yet) is waited for as before.
func TestRunnerSilentWorkerDropped(t *testing.T) {
	tr := newTier(t, 2)
	tr.minWorkers = 1
	tr.timeouts.WorkerStart = time.Hour
	p := tr.plan(tr.nodes)
	for i := range p.Workers {
		p.Workers[i].ReadyPattern = "" // ready by the port probe only, as the shipped configs
	}
	cut := net.JoinHostPort("127.0.0.1", strconv.Itoa(tr.ports["node2"]))
	probe := func(ctx context.Context, addr string) error {
		if addr == cut {
			<-ctx.Done()
			return fmt.Errorf("probe %s: %w", addr, ctx.Err())
		}
		return health.Probe(ctx, addr)
	}
	rn := startRunner(t, p, Options{Probe: probe, Replan: func(w []string) (*tier.Plan, error) { return tr.plan(w), nil }})
	until(t, "endpoint ready", func() bool { return endpointState(t, rn.plan) == endpoints.StateReady })
	dropped := rn.rec.find(func(e Event) bool { return e.Kind == EventDropped && e.Process == "rpc-node2" })
	if dropped == nil || !strings.Contains(dropped.Reason, "unreachable") {
		t.Fatalf("rpc-node2 not dropped as unreachable: %+v", dropped)
	}
	if n := rn.rec.count(func(e Event) bool { return e.Kind == EventDropped }); n != 1 {
		t.Errorf("%d workers dropped, want 1 (node3's answers)", n)
	}
}

// A second stop request with SkipDrain cuts the wait for a streamed
// completion short: the stream is cut and Run returns.
func TestRunnerSecondStopSkipsDrain(t *testing.T) {
	tr := newTier(t, 1)
	tr.headArgs = append(tr.headArgs, "--fake-tokens", "1000", "--fake-token-rate", "20", "--fake-hang-on-term-while-streaming=false")
	plan := tr.plan(tr.nodes)
	rn := startRunner(t, plan, Options{})
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	resp, err := complete(t, tr.headPort, true)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("streamed completion: %v %v", resp, err)
	}
	rn.r.Stop(StopRequest{Reason: ReasonCancelled})
	until(t, "endpoint draining", func() bool { return endpointState(t, plan) == endpoints.StateDraining })
	e, _ := readEndpoint(t, plan)
	if e.Reason != string(ReasonCancelled) {
		t.Errorf("draining reason = %q, want %q", e.Reason, ReasonCancelled)
	}
	rn.r.Stop(StopRequest{Reason: ReasonCancelled, SkipDrain: true})
	if err := rn.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, done := readSSE(resp); done {
		t.Error("the 1000-token stream finished although the drain was skipped")
	}
}

// A ready head that stops answering /health (SIGSTOP: it hangs) for longer
// than unhealthy_after is a head failure: it is killed and restarted alone.
func TestRunnerHeadUnhealthy(t *testing.T) {
	tr := newTier(t, 1)
	tr.timeouts.UnhealthyAfter, tr.timeouts.HealthTimeout, tr.timeouts.StopGrace = 500*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond
	plan := tr.plan(tr.nodes)
	rn := startRunner(t, plan, Options{})
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	worker := rn.pidOf("rpc-node1")
	if err := syscall.Kill(rn.pidOf("head"), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	until(t, "ready again", func() bool { return rn.stateCount(StateReady) == 2 })
	var reasons []string
	for _, e := range rn.rec.all() {
		if e.Kind == EventState && e.State == StateRecovering {
			reasons = append(reasons, e.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "/health failing for more than 500ms") {
		t.Errorf("recovering reasons = %q, want one naming unhealthy_after", reasons)
	}
	if rn.pidOf("rpc-node1") != worker {
		t.Error("the worker was restarted for a head failure")
	}
}

// A better reason asked for while the processes are being stopped (Slurm's
// answer to "why") is not lost: the stopped state names it.
func TestRunnerLateStopReasonKept(t *testing.T) {
	tr := newTier(t, 1)
	plan := tr.plan(tr.nodes)
	var r *Runner
	var once sync.Once
	rn := startRunner(t, plan, Options{Observer: func(e Event) {
		if e.Kind == EventState && e.State == StateDraining {
			once.Do(func() { r.Stop(StopRequest{Reason: ReasonPreempted}) })
		}
	}})
	r = rn.r
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	r.Stop(StopRequest{Reason: ReasonShutdown, SkipDrain: true})
	if err := rn.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	var got []string
	for _, e := range rn.rec.all() {
		if e.Kind == EventState && (e.State == StateDraining || e.State == StateStopped) {
			got = append(got, string(e.State)+" "+e.Reason)
		}
	}
	want := []string{"draining shutdown", "stopped preempted"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("states (-want +got):\n%s", d)
	}
}

// foreignServer runs a fake llama-server on port, as a stale head or
// another tier's would be, until the test ends.
func foreignServer(t *testing.T, port int) {
	t.Helper()
	cmd := exec.Command(fakeLlama, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	until(t, "the foreign server to answer", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// Regression: a head that never served was reported ready, because another
// server (a stale head, another tier on the same node) answered /health on
// its port. A port held at start is refused with the holder named; a
// server that appears later is not taken for the head.
func TestForeignServerOnHeadPortIsNotReady(t *testing.T) {
	t.Run("held before the start", func(t *testing.T) {
		tr := newTier(t, 0)
		tr.restart.MaxFailures = 2
		plan := tr.plan(nil)
		plan.Kind = tier.KindSingle
		plan.Head.Argv = []string{"sleep", "30"} // a head that never binds
		foreignServer(t, tr.headPort)
		rn := startRunner(t, plan, Options{})
		err := rn.wait(t)
		if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "already held by") {
			t.Errorf("Run = %v, want it to give up naming the port's holder", err)
		}
		if n := rn.stateCount(StateReady); n != 0 {
			t.Errorf("the tier was ready %d times on another server's /health", n)
		}
	})
	t.Run("appearing after the start", func(t *testing.T) {
		tr := newTier(t, 0)
		tr.restart.MaxFailures = 1
		tr.timeouts.Load = 2 * time.Second
		plan := tr.plan(nil)
		plan.Kind = tier.KindSingle
		plan.Head.Argv = []string{"sleep", "30"}
		rn := startRunner(t, plan, Options{})
		until(t, "the head to start", func() bool { return rn.pidOf("head") != 0 })
		foreignServer(t, tr.headPort)
		err := rn.wait(t)
		if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "not ready after") {
			t.Errorf("Run = %v, want it to give up: the head never became ready", err)
		}
		if n := rn.stateCount(StateReady); n != 0 {
			t.Errorf("the tier was ready %d times on another server's /health", n)
		}
		if !strings.Contains(rn.log.String(), "does not hold it") {
			t.Errorf("log does not say that /health came from another server:\n%s", rn.log.String())
		}
	})
}

// TestRunnerSilentWorkerLink: once the kernel shows the head's connection
// to a worker silent (sent data retransmitted, nothing acknowledged), the
// runner restarts the head and its workers at once, naming the worker,
// instead of waiting timeouts.stall (2 min) for a request to hang (issue
// 21, item 6). The kernel's view is a stand-in here; health's test cuts a
// real link.
func TestRunnerSilentWorkerLink(t *testing.T) {
	tr := newTier(t, 1)
	plan := tr.plan(tr.nodes)
	w := plan.Workers[0]
	dst := netip.MustParseAddrPort(net.JoinHostPort(w.Addr, strconv.Itoa(w.Port)))
	var cut atomic.Bool // the kernel shows the link silent once, when set
	links := func() ([]health.TCPConn, error) {
		if !cut.CompareAndSwap(true, false) {
			return []health.TCPConn{{Dst: dst}}, nil
		}
		return []health.TCPConn{{Dst: dst, Unacked: 2, Retransmits: health.SilentRetransmits}}, nil
	}
	rn := startRunner(t, plan, Options{Links: links})
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	worker := rn.pidOf("rpc-node1")
	cut.Store(true)
	until(t, "ready again", func() bool { return rn.stateCount(StateReady) == 2 })
	var reasons []string
	for _, e := range rn.rec.all() {
		if e.Kind == EventState && e.State == StateRecovering {
			reasons = append(reasons, e.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "the link to worker "+dst.String()+" is silent") {
		t.Errorf("recovering reasons = %q, want one naming the silent link", reasons)
	}
	if rn.pidOf("rpc-node1") == worker {
		t.Error("the worker was not restarted: it would keep the head's dead connection")
	}
}
