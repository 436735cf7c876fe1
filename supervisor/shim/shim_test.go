package shim

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/cmd/fake-llama/faketest"
)

const testToken = "t0k3n"

// waitTimeout bounds every wait on a real process; a test that hits it failed.
const waitTimeout = 10 * time.Second

// harness runs Run in-process around a real child.
type harness struct {
	t       *testing.T
	stdin   io.WriteCloser
	stdout  *faketest.Buffer
	stderr  *faketest.Buffer
	signals chan os.Signal
	status  chan int
}

// startShim runs the shim on argv with cfg's durations; the child's process
// group is killed when the test ends, whatever happened.
func startShim(t *testing.T, cfg Config, argv ...string) *harness {
	t.Helper()
	inR, inW := io.Pipe()
	h := &harness{t: t, stdin: inW, stdout: &faketest.Buffer{}, stderr: &faketest.Buffer{},
		signals: make(chan os.Signal, 4), status: make(chan int, 1)}
	cfg.Argv, cfg.Token = argv, testToken
	cfg.Stdin, cfg.Stdout, cfg.Stderr, cfg.Signals = inR, h.stdout, NewLineWriter(h.stderr), h.signals
	go func() { h.status <- Run(cfg) }()
	t.Cleanup(func() {
		if ev, ok := h.find(EventStarted); ok {
			_ = syscall.Kill(-ev.ChildPID, syscall.SIGKILL)
		}
		inW.Close()
		select {
		case <-h.status:
		case <-time.After(waitTimeout):
			t.Errorf("shim did not return after its child was killed")
		}
	})
	return h
}

// events parses the markers written so far.
func (h *harness) events() []Event {
	var evs []Event
	for _, line := range strings.Split(h.stderr.String(), "\n") {
		if ev, ok := ParseMarker(line, testToken); ok {
			evs = append(evs, ev)
		}
	}
	return evs
}

// find returns the last event of kind written so far.
func (h *harness) find(kind EventKind) (Event, bool) {
	evs := h.events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == kind {
			return evs[i], true
		}
	}
	return Event{}, false
}

// waitEvent polls until an event of kind (the n-th of that kind, n≥1) is written.
func (h *harness) waitEvent(kind EventKind, n int) Event {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		var got []Event
		for _, ev := range h.events() {
			if ev.Kind == kind {
				got = append(got, ev)
			}
		}
		if len(got) >= n {
			return got[n-1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("no %s event #%d within %v; stderr:\n%s", kind, n, waitTimeout, h.stderr.String())
	return Event{}
}

// waitOutput polls until the child's stdout contains s.
func (h *harness) waitOutput(s string) {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(h.stdout.String(), s) {
		if time.Now().After(deadline) {
			h.t.Fatalf("child never wrote %q; stdout:\n%s", s, h.stdout.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatus waits for Run to return.
func (h *harness) waitStatus() int {
	h.t.Helper()
	select {
	case s := <-h.status:
		h.status <- s // for Cleanup
		return s
	case <-time.After(waitTimeout):
		h.t.Fatalf("shim did not return; stderr:\n%s", h.stderr.String())
		return 0
	}
}

func (h *harness) send(cmd string) {
	h.t.Helper()
	if _, err := h.stdin.Write([]byte(cmd)); err != nil {
		h.t.Fatalf("write command: %v", err)
	}
}

// procStatus reads one field of /proc/PID/status, "" if the process is gone.
func procStatus(pid int, field string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// hasSignal reports whether the hex signal set in a /proc status field holds sig.
func hasSignal(t *testing.T, hexSet string, sig syscall.Signal) bool {
	t.Helper()
	v, err := strconv.ParseUint(hexSet, 16, 64)
	if err != nil {
		t.Fatalf("parse signal set %q: %v", hexSet, err)
	}
	return v&(1<<(uint(sig)-1)) != 0
}

// alive reports whether pid runs (exists and is not a zombie).
func alive(pid int) bool {
	state := procStatus(pid, "State")
	return state != "" && !strings.HasPrefix(state, "Z")
}

// summary is what a test compares about a finished run.
type summary struct {
	Stopping []string // "signal reason" of each stopping event
	Exited   Event
	Status   int
}

func summarize(h *harness, status int) summary {
	s := summary{Status: status}
	for _, ev := range h.events() {
		switch ev.Kind {
		case EventStopping:
			s.Stopping = append(s.Stopping, ev.Signal+" "+ev.Reason)
		case EventExited:
			s.Exited = Event{Kind: ev.Kind, Signal: ev.Signal, Reason: ev.Reason, ExitCode: ev.ExitCode, Status: ev.Status}
		}
	}
	return s
}

// TestSlurmSigtermHeldUntilStop pins the whole point of the shim: Slurm's
// SIGTERM to every process of the step must not reach the child, which
// keeps running until the supervisor says stop.
func TestSlurmSigtermHeldUntilStop(t *testing.T) {
	h := startShim(t, Config{Hold: time.Hour}, "sleep", "1000")
	child := h.waitEvent(EventStarted, 1).ChildPID
	if pgid, err := syscall.Getpgid(child); err != nil || pgid != child {
		t.Fatalf("child %d is in process group %d (err %v), want its own", child, pgid, err)
	}
	if !hasSignal(t, procStatus(child, "SigBlk"), syscall.SIGTERM) {
		t.Fatalf("child does not block SIGTERM: SigBlk=%s", procStatus(child, "SigBlk"))
	}
	// What Slurm does: SIGTERM to every process of the step, then to the shim.
	if err := syscall.Kill(-child, syscall.SIGTERM); err != nil {
		t.Fatalf("signal child group: %v", err)
	}
	h.signals <- syscall.SIGTERM
	ev := h.waitEvent(EventSignal, 1)
	if d := cmp.Diff(Event{Kind: EventSignal, Signal: "SIGTERM", Count: 1, ChildPID: child},
		Event{Kind: ev.Kind, Signal: ev.Signal, Count: ev.Count, ChildPID: ev.ChildPID}); d != "" {
		t.Errorf("signal event (-want +got):\n%s", d)
	}
	if !alive(child) || !hasSignal(t, procStatus(child, "ShdPnd"), syscall.SIGTERM) {
		t.Fatalf("child should be alive with SIGTERM pending: State=%q ShdPnd=%s",
			procStatus(child, "State"), procStatus(child, "ShdPnd"))
	}
	h.send("stop\n")
	got := summarize(h, h.waitStatus())
	want := summary{
		Stopping: []string{"SIGINT stop"},
		Exited:   Event{Kind: EventExited, Signal: "SIGINT", Reason: ReasonStop, ExitCode: -1, Status: 130},
		Status:   130,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("run (-want +got):\n%s", d)
	}
}

// TestStopSequences covers every way the shim ends its child.
func TestStopSequences(t *testing.T) {
	// ignoreINT: a child that ignores the stop signal (SIG_IGN survives exec).
	ignoreINT := []string{"sh", "-c", "trap '' INT; echo ready; exec sleep 1000"}
	ready := []string{"sh", "-c", "echo ready; exec sleep 1000"}
	tests := []struct {
		name    string
		cfg     Config
		argv    []string
		signals int    // stop signals sent to the shim
		command string // written to stdin after the signals
		close   bool   // close stdin after the command
		want    summary
	}{
		{
			name: "hold expires without a command", cfg: Config{Hold: 20 * time.Millisecond},
			argv: ready, signals: 1,
			want: summary{Stopping: []string{"SIGINT hold-expired"}, Status: 130,
				Exited: Event{Kind: EventExited, Signal: "SIGINT", Reason: ReasonHold, ExitCode: -1, Status: 130}},
		},
		{
			name: "negative hold stops at once", cfg: Config{Hold: -1},
			argv: ready, signals: 1,
			want: summary{Stopping: []string{"SIGINT hold-expired"}, Status: 130,
				Exited: Event{Kind: EventExited, Signal: "SIGINT", Reason: ReasonHold, ExitCode: -1, Status: 130}},
		},
		{
			name: "child ignoring the stop signal is killed after the grace",
			cfg:  Config{Hold: time.Hour, Grace: 20 * time.Millisecond},
			argv: ignoreINT, command: "stop\n",
			want: summary{Stopping: []string{"SIGINT stop", "SIGKILL grace-expired"}, Status: 137,
				Exited: Event{Kind: EventExited, Signal: "SIGKILL", Reason: ReasonStop, ExitCode: -1, Status: 137}},
		},
		{
			name: "stop-now kills at once", cfg: Config{Hold: time.Hour, Grace: time.Hour},
			argv: ignoreINT, signals: 1, command: "stop-now\n",
			want: summary{Stopping: []string{"SIGKILL stop-now"}, Status: 137,
				Exited: Event{Kind: EventExited, Signal: "SIGKILL", Reason: ReasonStopNow, ExitCode: -1, Status: 137}},
		},
		{
			name: "stop-now during the grace escalates", cfg: Config{Hold: time.Hour, Grace: time.Hour},
			argv: ignoreINT, command: "stop\nstop-now\n",
			want: summary{Stopping: []string{"SIGINT stop", "SIGKILL stop-now"}, Status: 137,
				Exited: Event{Kind: EventExited, Signal: "SIGKILL", Reason: ReasonStop, ExitCode: -1, Status: 137}},
		},
		{
			name: "custom stop signal", cfg: Config{Hold: time.Hour, StopSignal: syscall.SIGUSR1},
			argv: ready, command: "bogus\nstop\n",
			want: summary{Stopping: []string{"SIGUSR1 stop"}, Status: 138,
				Exited: Event{Kind: EventExited, Signal: "SIGUSR1", Reason: ReasonStop, ExitCode: -1, Status: 138}},
		},
		{
			name: "stdin closed while held stops the child", cfg: Config{Hold: time.Hour},
			argv: ready, signals: 1, close: true,
			want: summary{Stopping: []string{"SIGINT stdin-closed"}, Status: 130,
				Exited: Event{Kind: EventExited, Signal: "SIGINT", Reason: ReasonStdinClosed, ExitCode: -1, Status: 130}},
		},
		{
			name: "child exits on its own", cfg: Config{},
			argv: []string{"sh", "-c", "echo ready; exit 7"},
			want: summary{Status: 7, Exited: Event{Kind: EventExited, Reason: ReasonExited, ExitCode: 7, Status: 7}},
		},
		{
			name: "child killed by someone else", cfg: Config{},
			argv: []string{"sh", "-c", "echo ready; kill -KILL $$"},
			want: summary{Status: 137, Exited: Event{Kind: EventExited, Signal: "SIGKILL", Reason: ReasonExited, ExitCode: -1, Status: 137}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startShim(t, tt.cfg, tt.argv...)
			h.waitEvent(EventStarted, 1)
			h.waitOutput("ready")
			for i := 1; i <= tt.signals; i++ {
				h.signals <- syscall.SIGTERM
				h.waitEvent(EventSignal, i)
			}
			if tt.command != "" {
				h.send(tt.command)
			}
			if tt.close {
				h.stdin.Close()
			}
			if d := cmp.Diff(tt.want, summarize(h, h.waitStatus())); d != "" {
				t.Errorf("run (-want +got):\n%s\nstderr:\n%s", d, h.stderr.String())
			}
		})
	}
}

// TestSecondSignalKeepsHolding: a later SIGTERM (requeue, cancel, end of
// grace) is reported but does not stop the child; stopping is the
// supervisor's call.
func TestSecondSignalKeepsHolding(t *testing.T) {
	h := startShim(t, Config{Hold: time.Hour}, "sh", "-c", "echo ready; exec sleep 1000")
	child := h.waitEvent(EventStarted, 1).ChildPID
	h.waitOutput("ready")
	h.signals <- syscall.SIGTERM
	h.signals <- syscall.SIGINT
	ev := h.waitEvent(EventSignal, 2)
	if ev.Count != 2 || ev.Signal != "SIGINT" {
		t.Errorf("second signal event = %+v, want count 2, SIGINT", ev)
	}
	if _, ok := h.find(EventStopping); ok || !alive(child) {
		t.Fatalf("child stopped after a second signal; stderr:\n%s", h.stderr.String())
	}
	h.send("stop\n")
	if got := h.waitStatus(); got != 130 {
		t.Errorf("status = %d, want 130", got)
	}
}

// TestStdinClosedThenSignalStopsAtOnce: with nobody left to send "stop"
// (the supervisor is gone), a stop signal stops the child without a hold.
func TestStdinClosedThenSignalStopsAtOnce(t *testing.T) {
	h := startShim(t, Config{Hold: time.Hour}, "sh", "-c", "echo ready; exec sleep 1000")
	h.waitEvent(EventStarted, 1)
	h.waitOutput("ready")
	h.stdin.Close()
	h.waitEvent(EventStdinClosed, 1)
	h.signals <- syscall.SIGTERM
	want := summary{Stopping: []string{"SIGINT stdin-closed"}, Status: 130,
		Exited: Event{Kind: EventExited, Signal: "SIGINT", Reason: ReasonStdinClosed, ExitCode: -1, Status: 130}}
	if d := cmp.Diff(want, summarize(h, h.waitStatus())); d != "" {
		t.Errorf("run (-want +got):\n%s", d)
	}
}

// TestMarkerStartsALine: a child that leaves its stderr mid-line must not
// swallow the marker that follows.
func TestMarkerStartsALine(t *testing.T) {
	h := startShim(t, Config{Hold: time.Hour},
		"sh", "-c", "printf 'no newline' >&2; echo ready; exec sleep 1000")
	h.waitEvent(EventStarted, 1)
	h.waitOutput("ready")
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(h.stderr.String(), "no newline") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	h.signals <- syscall.SIGTERM
	h.waitEvent(EventSignal, 1)
	if !strings.Contains(h.stderr.String(), "no newline\n"+MarkerPrefix) {
		t.Errorf("marker not on its own line; stderr:\n%s", h.stderr.String())
	}
	h.send("stop\n")
	h.waitStatus()
}

func TestStartFailure(t *testing.T) {
	h := startShim(t, Config{}, "/nonexistent/llama-server")
	got := summarize(h, h.waitStatus())
	want := summary{Status: 127, Exited: Event{Kind: EventExited, Reason: ReasonStartFailed, ExitCode: -1, Status: 127}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("run (-want +got):\n%s", d)
	}
}

func TestInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no command", cfg: Config{Token: "x"}},
		{name: "no token", cfg: Config{Argv: []string{"true"}}},
		{name: "token with space", cfg: Config{Argv: []string{"true"}, Token: "a b"}},
		{name: "no streams", cfg: Config{Argv: []string{"true"}, Token: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Run(tt.cfg); got != 2 {
				t.Errorf("Run = %d, want 2", got)
			}
		})
	}
}

// helpers are the roles the test binary can play as a child process,
// chosen by SHIM_TEST_HELPER (the e2e tests add "batch").
var helpers = map[string]func() int{"shim": helperShim}

// TestMain lets the test binary act as a helper process (a shim to kill,
// a batch script for the e2e tests) when SHIM_TEST_HELPER names one.
func TestMain(m *testing.M) {
	if h, ok := helpers[os.Getenv("SHIM_TEST_HELPER")]; ok {
		os.Exit(h())
	}
	os.Exit(m.Run())
}

// helperShim is what cmd/llm-supervisor's runShim does, minus flags:
// Run on the command after "--", holding for SHIM_TEST_HOLD (default an
// hour), with the token SHIM_TEST_TOKEN (default testToken).
func helperShim() int {
	argv := os.Args
	for i, a := range argv {
		if a == "--" {
			argv = argv[i+1:]
			break
		}
	}
	hold, err := time.ParseDuration(os.Getenv("SHIM_TEST_HOLD"))
	if err != nil {
		hold = time.Hour
	}
	token := os.Getenv("SHIM_TEST_TOKEN")
	if token == "" {
		token = testToken
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	return Run(Config{Argv: argv, Token: token, Hold: hold, Grace: 2 * time.Second, Stdin: os.Stdin,
		Stdout: os.Stdout, Stderr: NewLineWriter(os.Stderr), Signals: sigs})
}

// shimProcess starts the test binary as a shim around argv in its own
// process group. The shim's group and its child's group are killed at
// cleanup.
func shimProcess(t *testing.T, argv ...string) (*exec.Cmd, *harness, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "SHIM_TEST_HELPER=shim")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitTimeout
	inW, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, stdin: inW, stdout: &faketest.Buffer{}, stderr: &faketest.Buffer{}}
	cmd.Stdout, cmd.Stderr = h.stdout, h.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start shim process: %v", err)
	}
	var child int
	t.Cleanup(func() {
		if child != 0 {
			_ = syscall.Kill(-child, syscall.SIGKILL)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		inW.Close()
		_ = cmd.Wait()
	})
	child = h.waitEvent(EventStarted, 1).ChildPID
	return cmd, h, child
}

// waitGone polls until pid has ended (gone, or a zombie nobody reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %v", pid, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKilledShimLeavesNoChild: kill -9 of the shim (OOM killer, Slurm's
// SIGKILL at the end of the grace) must not leave the child running.
func TestKilledShimLeavesNoChild(t *testing.T) {
	cmd, _, child := shimProcess(t, "sleep", "1000")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill shim: %v", err)
	}
	waitGone(t, child)
}

// TestRealSignalsThroughProcess: real SIGTERMs, as Slurm sends them to the
// shim and to the child's group, then "stop" on stdin; the shim exits with
// the child's status.
func TestRealSignalsThroughProcess(t *testing.T) {
	// bash, not dash: dash's trap unblocks every signal.
	cmd, h, child := shimProcess(t, "bash", "-c", "trap 'exit 3' INT; echo ready; while :; do sleep 0.05; done")
	h.waitOutput("ready")
	if err := syscall.Kill(-child, syscall.SIGTERM); err != nil {
		t.Fatalf("signal child group: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal shim: %v", err)
	}
	ev := h.waitEvent(EventSignal, 1)
	if ev.Signal != "SIGTERM" || !alive(child) {
		t.Fatalf("after SIGTERM: event %+v, child alive %v", ev, alive(child))
	}
	h.send(string(StopCommand(false)))
	err := cmd.Wait()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("shim exit = %v (%v), want 3; stderr:\n%s", cmd.ProcessState, err, h.stderr.String())
	}
	ev = h.waitEvent(EventExited, 1)
	if ev.Status != 3 || ev.Reason != ReasonStop {
		t.Errorf("exited event = %+v, want status 3 reason stop", ev)
	}
}

// A shielded child is told that its SIGTERM is blocked (BlockedEnv); an
// unshielded one is not.
func TestChildToldSIGTERMBlocked(t *testing.T) {
	tests := []struct {
		name       string
		unshielded bool
		want       string
	}{
		{name: "shielded", want: "blocked=1"},
		{name: "unshielded", unshielded: true, want: "blocked="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startShim(t, Config{Unshielded: tt.unshielded}, "sh", "-c", "echo blocked=$"+BlockedEnv)
			if status := h.waitStatus(); status != 0 {
				t.Fatalf("status %d", status)
			}
			if got := strings.TrimSpace(h.stdout.String()); got != tt.want {
				t.Errorf("child printed %q, want %q", got, tt.want)
			}
		})
	}
}

// A server already answering on the child's port (a stale head, another
// tier's) would pass for the child: the shim refuses to start it and names
// the holder.
func TestPortBusyRefusesToStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	h := startShim(t, Config{Port: port}, "sleep", "100")
	status := h.waitStatus()
	if status != PortBusyStatus {
		t.Errorf("status = %d, want %d", status, PortBusyStatus)
	}
	busy, ok := h.find(EventPortBusy)
	if !ok || busy.Port != port || busy.Holder != os.Getpid() {
		t.Errorf("port-busy marker = %+v (found %v), want port %d held by pid %d", busy, ok, port, os.Getpid())
	}
	if _, started := h.find(EventStarted); started {
		t.Error("the child was started on a busy port")
	}
}

// The shim reports when its own child holds the port, so the supervisor
// trusts /health only then.
func TestListeningReported(t *testing.T) {
	fake, err := faketest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	port := faketest.FreePort(t)
	h := startShim(t, Config{Port: port}, fake, "rpc-server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	if ev := h.waitEvent(EventListening, 1); ev.Port != port {
		t.Errorf("listening marker = %+v, want port %d", ev, port)
	}
	h.send("stop\n")
	h.waitStatus()
}

// TestLeaseKillsTheChildUnlessRenewed: with a lease, the child lives only
// until the time the supervisor last renewed it to ("lease T" on stdin); a
// supervisor frozen by SIGSTOP or stuck on a hung NFS mount renews nothing,
// and its child (an elastic leader's head) is killed when the lease ends,
// before the next leader starts its own (issue 21, item 1). The end is an
// absolute time: a renewal that arrives late cannot push it past the time
// it names (issue 30: counted from its arrival, every hop lengthened it). A
// lease command without a lease armed starts none.
func TestLeaseKillsTheChildUnlessRenewed(t *testing.T) {
	ready := []string{"sh", "-c", "echo ready; exec sleep 1000"}
	t.Run("renewed, it runs; not renewed, it is killed", func(t *testing.T) {
		h := startShim(t, Config{LeaseUntil: time.Now().Add(time.Second)}, ready...)
		h.waitEvent(EventStarted, 1)
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if _, err := h.stdin.Write(LeaseCommand(time.Now().Add(time.Second))); err != nil {
				t.Fatal(err)
			}
		}
		if ev, ok := h.find(EventStopping); ok {
			t.Fatalf("the child was stopped while its lease was renewed: %+v", ev)
		}
		ev := h.waitEvent(EventExited, 1)
		if ev.Reason != ReasonLease || ev.Signal != "SIGKILL" {
			t.Errorf("the child ended %+v, want killed (SIGKILL) for %s", ev, ReasonLease)
		}
	})
	t.Run("a renewal to a time already past kills at once", func(t *testing.T) {
		h := startShim(t, Config{LeaseUntil: time.Now().Add(time.Hour)}, ready...)
		h.waitEvent(EventStarted, 1)
		end := time.Now().Add(-time.Second) // a renewal that spent longer on its way than the lead had left
		if _, err := h.stdin.Write(LeaseCommand(end)); err != nil {
			t.Fatal(err)
		}
		ev := h.waitEvent(EventExited, 1)
		if ev.Reason != ReasonLease || ev.Signal != "SIGKILL" {
			t.Errorf("the child ended %+v, want killed (SIGKILL) for %s", ev, ReasonLease)
		}
	})
	t.Run("no lease: renewals start none", func(t *testing.T) {
		h := startShim(t, Config{}, ready...)
		h.waitEvent(EventStarted, 1)
		h.stdin.Write(LeaseCommand(time.Now().Add(10 * time.Millisecond)))
		time.Sleep(200 * time.Millisecond) // a lease that started would have ended 20 times over
		if ev, ok := h.find(EventStopping); ok {
			t.Errorf("a child without a lease was stopped: %+v", ev)
		}
	})
}
