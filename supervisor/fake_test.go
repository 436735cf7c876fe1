package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/supervisor/clock"
	"slurm-llm/supervisor/tier"
)

// The runner's state machine on a fake clock, with a fake launcher and a
// fake head answering over an in-memory HTTP transport: no process, no
// socket, no real wait. Tests advance the clock and read what the runner
// did, exactly.

// fakeProc is one process the fake launcher started.
type fakeProc struct {
	name  string
	pid   int
	done  chan struct{}
	ready chan struct{}
	// unreachable is what the process reports it could not connect to.
	unreachable chan string
	once        sync.Once
	mu          sync.Mutex
	res         ExitResult
	ended       string // "stopped", "killed", "exited"
	// spec is what it was started with; leases its lease renewals.
	spec   tier.Process
	leases []time.Time
}

// Lease records a renewal of the process's lease (Leaser).
func (p *fakeProc) Lease(until time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leases = append(p.leases, until)
	return true
}

// leased is the lease renewals so far.
func (p *fakeProc) leased() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.leases...)
}

func (p *fakeProc) PID() int                   { return p.pid }
func (p *fakeProc) Ready() <-chan struct{}     { return p.ready }
func (p *fakeProc) Unreachable() <-chan string { return p.unreachable }
func (p *fakeProc) Listening() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) Result() ExitResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}
func (p *fakeProc) Stop(time.Duration) { p.end("stopped", ExitResult{}) }
func (p *fakeProc) Kill()              { p.end("killed", ExitResult{Code: -1, Signal: syscall.SIGKILL}) }

// end makes the process exit (once) and says how.
func (p *fakeProc) end(how string, r ExitResult) {
	p.once.Do(func() {
		p.mu.Lock()
		p.res, p.ended = r, how
		p.mu.Unlock()
		close(p.done)
	})
}

// how says how the process ended ("" while it runs).
func (p *fakeProc) how() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// fakeLauncher starts fakeProcs; workers are ready at once.
type fakeLauncher struct {
	mu      sync.Mutex
	started []*fakeProc
	nextPID int
}

func (l *fakeLauncher) Start(p tier.Process) (Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextPID++
	fp := &fakeProc{name: p.Name, pid: 1000 + l.nextPID, done: make(chan struct{}), ready: make(chan struct{}),
		unreachable: make(chan string, 4), spec: p}
	if p.Role == tier.RoleWorker {
		close(fp.ready)
	}
	l.started = append(l.started, fp)
	return fp, nil
}

// last returns the latest start of the process named name.
func (l *fakeLauncher) last(name string) *fakeProc {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.started) - 1; i >= 0; i-- {
		if l.started[i].name == name {
			return l.started[i]
		}
	}
	return nil
}

// fakeHead answers the runner's HTTP requests to the head.
type fakeHead struct {
	mu sync.Mutex
	// health is /health's status; 200 once loaded.
	health int
	// metrics are /metrics' answers, one per request, the last repeated;
	// a number is requests_processing, a negative one an HTTP status.
	metrics []int
	asked   int
	// work is llamacpp:n_decode_total; negative leaves it out of /metrics.
	work int
	// slots is GET /slots' answer (JSON); saveDir where a slot save
	// writes (POST /slots/N?action=save), saved the files it wrote;
	// hangSave holds each save until it is closed (or the request ends).
	slots    string
	saveDir  string
	saved    []string
	hangSave chan struct{}
}

// slotAction answers POST /slots/N?action=save as llama-server does
// (FACTS.md Q12), writing the file; it is called without h.mu held.
func (h *fakeHead) slotAction(req *http.Request) (int, string) {
	h.mu.Lock()
	hang, dir := h.hangSave, h.saveDir
	h.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
			return 0, ""
		}
	}
	var body struct {
		Filename string `json:"filename"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil || req.URL.Query().Get("action") != "save" {
		return 400, `{"error":{"code":400}}`
	}
	if err := os.WriteFile(filepath.Join(dir, body.Filename), []byte("kv"), 0o644); err != nil {
		return 500, `{"error":{"code":500}}`
	}
	h.mu.Lock()
	h.saved = append(h.saved, body.Filename)
	h.mu.Unlock()
	id := strings.TrimPrefix(req.URL.Path, "/slots/")
	return 200, fmt.Sprintf(`{"id_slot":%s,"filename":%q,"n_saved":12,"n_written":2,"timings":{"save_ms":1.5}}`, id, body.Filename)
}

func (h *fakeHead) savedFiles() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.saved...)
}

func (h *fakeHead) setWork(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.work = n
}

func (h *fakeHead) setMetrics(answers ...int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.metrics, h.asked = answers, 0
}

func (h *fakeHead) metricsAsked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked
}

// RoundTrip implements http.RoundTripper.
func (h *fakeHead) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/slots/") {
		status, body := h.slotAction(req)
		if status == 0 {
			return nil, req.Context().Err()
		}
		return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: req}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	status, body := 404, ""
	switch req.URL.Path {
	case "/slots":
		status, body = 200, h.slots
	case "/health":
		status, body = h.health, `{"status":"ok"}`
	case "/v1/models":
		status, body = 200, `{"models":[{"name":"m"}],"object":"list","data":[{"id":"m"}]}`
	case "/metrics":
		n := 0
		if len(h.metrics) > 0 {
			n = h.metrics[min(h.asked, len(h.metrics)-1)]
		}
		h.asked++
		if n < 0 {
			status, body = -n, "busy"
		} else {
			status, body = 200, fmt.Sprintf("llamacpp:requests_processing %d\nllamacpp:requests_deferred 0\n", n)
			if h.work >= 0 {
				body += fmt.Sprintf("llamacpp:n_decode_total %d\n", h.work)
			}
		}
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: req}, nil
}

// fakeRig is a runner on a fake clock with a fake launcher and head.
type fakeRig struct {
	t      *testing.T
	clk    *clock.Fake
	l      *fakeLauncher
	head   *fakeHead
	r      *Runner
	plan   *tier.Plan
	events chan Event
	done   chan error
}

// rigPlan is a distributed plan of two workers with round timeouts.
func rigPlan(t *testing.T, workers int) *tier.Plan {
	p := &tier.Plan{Tier: "t", Kind: tier.KindDistributed, JobID: "9", EndpointHost: "10.0.0.1", EndpointPort: 8080,
		EndpointDir: t.TempDir(), MinWorkers: 1,
		Timeouts: tier.Timeouts{WorkerStart: 10 * time.Second, Load: time.Minute, HealthInterval: time.Second,
			HealthTimeout: time.Second, UnhealthyAfter: 5 * time.Second, StopGrace: 5 * time.Second,
			Heartbeat: 5 * time.Second, Lease: 30 * time.Second, Stall: 30 * time.Second},
		Restart: tier.RestartSettings{InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2,
			MaxFailures: 10, Window: time.Hour, ResetAfter: time.Hour, WorkerStartFailures: 3},
		Drain: tier.DrainSettings{Budget: 25 * time.Second, InFlightPoll: 250 * time.Millisecond, MaxFailedRuns: 3},
		Head:  tier.Process{Name: "head", Role: tier.RoleHead, Node: "n0", Addr: "10.0.0.1", Port: 8080, Argv: []string{"head"}},
	}
	for i := 1; i <= workers; i++ {
		n := fmt.Sprintf("n%d", i)
		// No port: the fake workers are ready by their ready channel, and
		// nothing probes a socket that does not exist.
		p.Workers = append(p.Workers, tier.Process{Name: "rpc-" + n, Role: tier.RoleWorker, Node: n,
			Addr: "10.0.0." + fmt.Sprint(i+1), Argv: []string{"rpc"}})
	}
	return p
}

// newFakeRig starts a runner for plan; Cleanup cancels it.
func newFakeRig(t *testing.T, plan *tier.Plan, more ...func(*Options)) *fakeRig {
	g := &fakeRig{t: t, clk: clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)),
		l: &fakeLauncher{}, head: &fakeHead{health: 200}, plan: plan,
		events: make(chan Event, 1000), done: make(chan error, 1)}
	opts := Options{Launcher: g.l, Clock: g.clk, Rand: func() float64 { return 0.5 },
		HTTPClient: &http.Client{Transport: g.head}, RunID: "0123456789abcdef",
		Observer: func(e Event) { g.events <- e }}
	for _, m := range more {
		m(&opts)
	}
	r, err := New(plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	ctx, cancel := context.WithCancel(context.Background())
	go func() { g.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			t.Error("runner did not return after cancel")
		}
	})
	return g
}

// waitEvent reads events until one matches, failing after a real-time
// deadline; it returns the events read, the match last.
func (g *fakeRig) waitEvent(what string, match func(Event) bool) []Event {
	g.t.Helper()
	var seen []Event
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-g.events:
			seen = append(seen, e)
			if match(e) {
				return seen
			}
		case <-deadline:
			g.t.Fatalf("timed out waiting for %s; saw %v", what, describe(seen))
			return nil
		}
	}
}

// state matches a state event.
func state(s State) func(Event) bool {
	return func(e Event) bool { return e.Kind == EventState && e.State == s }
}

// describe names events for failure messages.
func describe(es []Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s%s %s", e.Kind, e.Process, e.State, e.Reason))
	}
	return out
}

// ready brings the tier to ready: advance until the head is checked.
func (g *fakeRig) ready() {
	g.t.Helper()
	g.advanceUntil("tier ready", state(StateReady), 100*time.Millisecond)
}

// advanceUntil advances the clock by step, again and again, until an event
// matches (at most a simulated hour).
func (g *fakeRig) advanceUntil(what string, match func(Event) bool, step time.Duration) []Event {
	g.t.Helper()
	var seen []Event
	for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += step {
		g.settle()
		for {
			select {
			case e := <-g.events:
				seen = append(seen, e)
				if match(e) {
					return seen
				}
				continue
			default:
			}
			break
		}
		g.clk.Advance(step)
	}
	g.t.Fatalf("%s did not happen within a simulated hour; saw %v", what, describe(seen))
	return nil
}

// advanceFor advances the clock by step until cond holds (at most a
// simulated hour), letting the endpoint writer finish between steps.
func (g *fakeRig) advanceFor(what string, cond func() bool, step time.Duration) {
	g.t.Helper()
	for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += step {
		g.settle()
		_ = g.r.pub.wait(context.Background())
		if cond() {
			return
		}
		g.clk.Advance(step)
	}
	g.t.Fatalf("%s did not happen within a simulated hour", what)
}

// settle waits until the runner has taken what the last Advance fired:
// every tick read, nothing in its queues, and no question of the Run
// goroutine under way (HTTP answers come back through it), twice in a row
// 200 µs apart (the Run goroutine may be acting on what it took last). A
// busy machine slows it rather than making it skip: a question is waited
// for up to 250 ms of real time (one that takes longer is a head made to
// hang, whose timeout the test's own clock drives), the rest up to 10 s;
// once Run has returned, nothing.
func (g *fakeRig) settle() {
	start := time.Now()
	quiet := func() bool {
		select {
		case <-g.r.quit:
			return true // Run has returned: nothing will take the rest
		default:
		}
		asked := g.r.asking.Load() == 0 || time.Since(start) > 250*time.Millisecond
		return g.clk.Unread() == 0 && asked && len(g.r.msgs) == 0 && len(g.r.stopCh) == 0
	}
	deadline := start.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if quiet() {
			time.Sleep(200 * time.Microsecond)
			if quiet() {
				return
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// file reads the tier's endpoint file; ok is false when it is absent.
func (g *fakeRig) file() (endpoints.Endpoint, bool) {
	scan, err := endpoints.ReadDir(g.plan.EndpointDir, endpoints.ReadOptions{})
	if err != nil || len(scan.Entries) == 0 {
		return endpoints.Endpoint{}, false
	}
	return scan.Entries[0].Endpoint, true
}
