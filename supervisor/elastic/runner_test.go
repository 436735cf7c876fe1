package elastic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"slurm-llm/endpoints/members"
	"slurm-llm/supervisor"
	"slurm-llm/supervisor/clock"
	"slurm-llm/supervisor/tier"

	"github.com/hashicorp/go-hclog"
)

// A tier of member runners, each a job on its own node, stepped by hand on
// one fake clock: every round advances the clock a second and steps each
// member in turn, handling what its helpers reported. Heads and
// rpc-servers are fakes; the membership files are real, in a temp dir.

// procFake is a started rpc-server: listening at once, ended by Stop.
type procFake struct {
	pid       int
	done      chan struct{}
	listening chan struct{}
	once      sync.Once
	// stopping, when set, holds a Stop until it is closed.
	stopping chan struct{}
}

func (p *procFake) PID() int                      { return p.pid }
func (p *procFake) Ready() <-chan struct{}        { return nil }
func (p *procFake) Listening() <-chan struct{}    { return p.listening }
func (p *procFake) Unreachable() <-chan string    { return nil }
func (p *procFake) Done() <-chan struct{}         { return p.done }
func (p *procFake) Result() supervisor.ExitResult { return supervisor.ExitResult{} }
func (p *procFake) Stop(time.Duration) {
	if p.stopping != nil {
		<-p.stopping
	}
	p.once.Do(func() { close(p.done) })
}
func (p *procFake) Kill() { p.Stop(0) }

type launcherFake struct {
	mu   sync.Mutex
	n    int
	live map[*procFake]bool
	// slow: the rpc-servers it starts listen only once release is called.
	slow bool
	held []chan struct{}
	// stopping, when set, holds the Stop of every rpc-server it starts
	// until it is closed.
	stopping chan struct{}
}

func (l *launcherFake) Start(tier.Process) (supervisor.Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	p := &procFake{pid: l.n, done: make(chan struct{}), listening: make(chan struct{}), stopping: l.stopping}
	if l.slow {
		l.held = append(l.held, p.listening)
	} else {
		close(p.listening)
	}
	return p, nil
}

// release lets the rpc-servers a slow launcher started listen, and the
// later ones at once.
func (l *launcherFake) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.held {
		close(c)
	}
	l.held, l.slow = nil, false
}

// headFake is a leader's head: it runs until stopped.
type headFake struct {
	plan *tier.Plan
	HeadRun
	stopped chan struct{}
	once    sync.Once
	mu      sync.Mutex
	req     supervisor.StopRequest // the first stop request
	leases  []time.Time            // the lease renewals, in order
}

func (h *headFake) Run(ctx context.Context) error {
	select {
	case <-h.stopped:
	case <-ctx.Done():
	}
	return nil
}

// Lease records a renewal of the head's lease.
func (h *headFake) Lease(until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leases = append(h.leases, until)
}

// leased is the renewals so far.
func (h *headFake) leased() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.leases...)
}

func (h *headFake) Stop(req supervisor.StopRequest) {
	h.once.Do(func() {
		h.mu.Lock()
		h.req = req
		h.mu.Unlock()
		close(h.stopped)
	})
}

func (h *headFake) stopReq() supervisor.StopRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.req
}

// rpcArg is the head's --rpc value.
func (h *headFake) rpcArg() string {
	for i, a := range h.plan.Head.Argv {
		if a == "--rpc" && i+1 < len(h.plan.Head.Argv) {
			return h.plan.Head.Argv[i+1]
		}
	}
	return ""
}

// memberRig is one member under test.
type memberRig struct {
	job      string
	launcher *launcherFake
	r        *Runner
	heads    []*headFake
	left     bool
}

type tierRig struct {
	t       *testing.T
	clk     *clock.Fake
	cfg     *tier.Config
	dir     string
	members []*memberRig
	busy    bool // what the heads answer when asked for requests in flight
	// slowNext: the next member joined has an rpc-server that listens only
	// once its launcher is released.
	slowNext bool
}

func newTierRig(t *testing.T) *tierRig {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := strings.NewReplacer(`"/e"`, `"`+dir+`"`, `"/l"`, `"`+dir+`/logs"`, `model = "/m.gguf"`, `model = "`+model+`"`).
		Replace(elasticRunnerConfig)
	cfg, err := tier.ParseConfig("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return &tierRig{t: t, clk: clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)), cfg: cfg, dir: dir}
}

const elasticRunnerConfig = `tier = "reasoning"
kind = "distributed"
endpoint_dir = "/e"
log_dir = "/l"
[head]
command = ["llama-server", "--rpc", "{rpc}", "--tensor-split", "{tensor_split}", "--ctx-size", "{ctx}"]
port = 8081
[worker]
command = ["rpc-server", "-H", "{addr}", "-p", "{port}", "-c"]
port = 50052
[elastic]
members = 3
model = "/m.gguf"
grow_after = "30s"
[elastic.plans.3]
ctx = 131072
tensor_split = [27, 26, 27]
[elastic.plans.2]
ctx = 65536
tensor_split = [40, 40]
`

// join adds a member with job id job on node nodeN.
func (g *tierRig) join(job string, n int) *memberRig {
	m := &memberRig{job: job, launcher: &launcherFake{slow: g.slowNext}}
	g.slowNext = false
	r, err := NewRunner(Options{Config: g.cfg, RunID: fmt.Sprintf("%016x", n+1000),
		Self:     tier.Member{JobID: job, Node: fmt.Sprintf("node%d", n), Addr: fmt.Sprintf("10.78.0.%d", 10+n)},
		Files:    NewStore(g.dir, "reasoning", nil),
		Launcher: m.launcher, Clock: g.clk,
		NewHead: func(plan *tier.Plan, run HeadRun) (Head, error) {
			h := &headFake{plan: plan, HeadRun: run, stopped: make(chan struct{})}
			m.heads = append(m.heads, h)
			return h, nil
		},
		InFlight: func(context.Context) (int, error) {
			if g.busy {
				return 1, nil
			}
			return 0, nil
		},
	})
	if err != nil {
		g.t.Fatal(err)
	}
	m.r = r
	g.members = append(g.members, m)
	return m
}

// round advances the clock a second and steps every member that has not
// left, then hands each the messages its helpers sent.
func (g *tierRig) round() {
	g.clk.Advance(time.Second)
	for _, m := range g.members {
		if m.left {
			continue
		}
		m.r.step()
		g.drain(m)
	}
}

// drain handles a member's messages until its helpers are quiet and its
// tick's file I/O is done.
func (g *tierRig) drain(m *memberRig) {
	for {
		select {
		case msg := <-m.r.msgs:
			m.r.handleMsg(msg)
			if m.r.done {
				m.left = true
			}
		case <-time.After(20 * time.Millisecond):
			if !m.r.ticking || m.left {
				return
			}
		}
	}
}

// until runs rounds until cond holds (at most two simulated minutes).
func (g *tierRig) until(what string, cond func() bool) {
	g.t.Helper()
	for i := 0; i < 120; i++ {
		if cond() {
			return
		}
		g.round()
	}
	g.t.Fatalf("%s did not happen in 120 rounds", what)
}

// running is the member's head still running (its last one, not stopped).
func (m *memberRig) running() *headFake {
	if m.r.head == nil || len(m.heads) == 0 {
		return nil
	}
	return m.heads[len(m.heads)-1]
}

// leader is the member whose head runs, if exactly one.
func (g *tierRig) leader() *memberRig {
	var found *memberRig
	for _, m := range g.members {
		if !m.left && m.running() != nil {
			if found != nil {
				g.t.Fatalf("two heads at once: %s and %s", found.job, m.job)
			}
			found = m
		}
	}
	return found
}

func TestMembersLeadShrinkAndGrow(t *testing.T) {
	g := newTierRig(t)
	m100, m101, m102 := g.join("100", 1), g.join("101", 2), g.join("102", 3)
	g.until("the youngest leads with a head over the other two", func() bool {
		l := g.leader()
		return l == m102 && l.running().rpcArg() == "10.78.0.11:50052,10.78.0.12:50052"
	})
	h := m102.running()
	if h.Serving != "3 of 3 nodes, context 131072" || h.Term != 1 {
		t.Errorf("head serving %q term %d, want 3 of 3 nodes, context 131072, term 1", h.Serving, h.Term)
	}

	// Science takes node1: member 100 leaves; the head drains and re-plans
	// on two nodes; 100 lets go once the head no longer uses it.
	m100.r.handleStop(supervisor.StopRequest{Reason: supervisor.ReasonPreempted, Since: g.clk.Now()})
	g.until("member 100 to leave", func() bool { return m100.left })
	req := h.stopReq()
	if req.SkipDrain || !strings.Contains(string(req.Reason), "member 100 leaves") {
		t.Errorf("the head was stopped with %+v, want a drain for member 100 leaving", req)
	}
	g.until("a head on two nodes", func() bool {
		l := g.leader()
		return l == m102 && l.running() != h && l.running().rpcArg() == "10.78.0.12:50052"
	})
	if s := m102.running().Serving; s != "2 of 3 nodes, context 65536" {
		t.Errorf("serving %q, want 2 of 3 nodes, context 65536", s)
	}

	// Member 100's job comes back (requeued: a new run) and joins; the
	// leader grows back only once the head has been idle for grow_after.
	g.busy = true
	back := g.join("100", 1)
	back.r.o.RunID = "00000000000009aa"
	before := m102.running()
	for i := 0; i < 40; i++ {
		g.round()
	}
	if m102.running() != before {
		t.Fatal("the leader re-planned while busy")
	}
	g.busy = false
	g.until("a head on three nodes again", func() bool {
		l := g.leader()
		return l == m102 && l.running() != nil && l.running().plan != nil &&
			strings.Count(l.running().rpcArg(), ",") == 1
	})

	// The leader itself is taken: it drains, resigns, and the youngest
	// remaining member takes the next term and leads on two nodes.
	m102.r.handleStop(supervisor.StopRequest{Reason: supervisor.ReasonPreempted, Since: g.clk.Now()})
	g.until("the leader to leave", func() bool { return m102.left })
	g.until("member 101 to lead", func() bool { return g.leader() == m101 })
	if h := m101.running(); h.Term != 2 || h.rpcArg() != "10.78.0.11:50052" {
		t.Errorf("new head term %d --rpc %q, want term 2 over member 100's node", h.Term, h.rpcArg())
	}
	if m101.r.worker != nil {
		t.Error("the new leader still runs its rpc-server")
	}
}

// The first member up leads; younger members that join later take the
// lead over once the head is idle (Slurm preempts the oldest job first).
func TestLeadHandedToYoungerWhenIdle(t *testing.T) {
	g := newTierRig(t)
	m100 := g.join("100", 1)
	g.until("member 100 to lead alone: nothing to serve with one node", func() bool {
		return m100.r.agent.Role() == RoleLeader && m100.running() == nil
	})
	m101, m102 := g.join("101", 2), g.join("102", 3)
	_ = m101
	g.until("member 102 to lead, after the idle handover", func() bool { return g.leader() == m102 })
	if h := m102.running(); h.Term != 2 || h.Serving != "3 of 3 nodes, context 131072" {
		t.Errorf("head term %d serving %q, want term 2 on 3 of 3 nodes", h.Term, h.Serving)
	}
}

// A member whose lease runs out (its node lost, its link to the shared
// file system cut) is dropped from the head at once, without a drain: a
// head blocked on a silent worker would never drain.
func TestLostMemberReplannedAtOnce(t *testing.T) {
	g := newTierRig(t)
	m100, _, m102 := g.join("100", 1), g.join("101", 2), g.join("102", 3)
	g.until("a head on three nodes", func() bool {
		l := g.leader()
		return l == m102 && strings.Count(l.running().rpcArg(), ",") == 1
	})
	h := m102.running()
	m100.left = true // its node is gone: it never writes again
	g.until("a head on two nodes", func() bool { return m102.running() != nil && m102.running() != h })
	if req := h.stopReq(); !req.SkipDrain || !strings.Contains(string(req.Reason), "member 100 lost") {
		t.Errorf("the head was stopped with %+v, want at once for member 100 lost", req)
	}
}

// A member whose node cannot read the model serves as a worker and never
// leads, though it is the youngest.
func TestMemberWithoutTheModelNeverLeads(t *testing.T) {
	g := newTierRig(t)
	g.join("100", 1)
	g.join("101", 2)
	if err := os.Chmod(g.cfg.Elastic.Model, 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root reads any file: make the path unreadable another way
		g.cfg.Elastic.Model = filepath.Join(g.dir, "missing.gguf")
	}
	m102 := g.join("102", 3)
	if !m102.r.agent.want.CannotLead {
		t.Fatal("member 102 does not say it cannot lead")
	}
	g.until("member 101 to lead over 100 and 102", func() bool {
		l := g.leader()
		return l != nil && l.job == "101" && strings.Count(l.running().rpcArg(), ",") == 1
	})
}

// A file of the member directory that the store does not take is logged
// once (per reason), not at every tick, and changes nothing.
func TestIgnoredMemberFileLoggedOnce(t *testing.T) {
	g := newTierRig(t)
	m := g.join("100", 1)
	var buf bytes.Buffer
	m.r.log = hclog.New(&hclog.LoggerOptions{Output: &buf})
	g.join("101", 2)
	dir := filepath.Join(g.dir, "members", "reasoning")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "member-999.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		g.round()
	}
	if n := strings.Count(buf.String(), "file ignored"); n != 1 {
		t.Errorf("%d lines about the malformed file in 5 ticks, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "member-999.json") {
		t.Errorf("the line does not name the file:\n%s", buf.String())
	}
}

// At the tier's start a member whose rpc-server is still starting is waited
// for (at most a lease) when it makes a larger plan: the head starts once
// on three nodes instead of on two and again on three after grow_after.
func TestHeadWaitsForStartingMembers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		release bool
		commas  int // in the first head's --rpc: workers - 1
	}{
		{name: "ready within the lease: one head on three nodes", release: true, commas: 1},
		{name: "never ready: after a lease, the head starts on two", release: false, commas: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newTierRig(t)
			g.join("100", 1)
			g.slowNext = true
			slow := g.join("101", 2)
			leader := g.join("102", 3)
			g.until("term 1 taken by 102", func() bool { return leader.r.agent.Last().Lead })
			for range 3 {
				g.round()
			}
			if len(leader.heads) != 0 {
				t.Fatalf("the head started while member 101's rpc-server was starting (%d s into the term): --rpc %s",
					3, leader.heads[0].rpcArg())
			}
			if tt.release {
				slow.launcher.release()
			}
			g.until("a head", func() bool { return len(leader.heads) > 0 })
			if got := strings.Count(leader.heads[0].rpcArg(), ","); got != tt.commas {
				t.Errorf("first head --rpc %q: %d commas, want %d", leader.heads[0].rpcArg(), got, tt.commas)
			}
		})
	}
}

// A member ticks four times as often while the membership settles (no
// leader yet, a leader without its head, a worker whose rpc-server is not
// up) and at Tick once the tier serves.
func TestTickFasterWhileSettling(t *testing.T) {
	g := newTierRig(t)
	a, b, c := g.join("100", 1), g.join("101", 2), g.join("102", 3)
	g.round()
	for _, m := range []*memberRig{a, b, c} {
		if got := m.r.tickEvery(); got != m.r.o.Tick/4 {
			t.Errorf("member %s with no leader yet ticks every %v, want %v", m.job, got, m.r.o.Tick/4)
		}
	}
	g.until("a head on three nodes", func() bool {
		l := g.leader()
		return l != nil && strings.Count(l.running().rpcArg(), ",") == 1
	})
	g.round()
	for _, m := range []*memberRig{a, b, c} {
		if got := m.r.tickEvery(); got != m.r.o.Tick {
			t.Errorf("member %s of a serving tier ticks every %v, want %v", m.job, got, m.r.o.Tick)
		}
	}
}

// failWrites is a member directory whose writes fail (a hung or full
// shared file system, as the member sees it).
type failWrites struct{ Files }

func (failWrites) WriteMember(Member) error { return errors.New("write: input/output error") }

// TestLeaderLeasesItsHead: the leader's head starts with a lease that
// ends when the lead does (Timing.LeadEnd: skew and the margin before the
// leader's member lease ends), and every tick that renews the member lease
// renews the head's to the new lead end; once the member file cannot be
// written, nothing renews the head's lease past the last lead end, and the
// member stops its head when the lead has ended (issue 21, item 1: a
// frozen leader's head ran on beside the next leader's for 6 s; issue 30:
// the lease is an absolute time, one function computes it).
func TestLeaderLeasesItsHead(t *testing.T) {
	g := newTierRig(t)
	g.join("100", 1)
	g.join("101", 2)
	m102 := g.join("102", 3)
	g.until("member 102 leads", func() bool { return g.leader() == m102 })
	e := g.cfg.Elastic
	leadEnd := func() time.Time { return m102.r.agent.Self().LeaseExpires.Add(-e.Skew - tier.LeadMargin) }
	h := m102.running()
	if got := h.plan.Head.LeaseUntil; !got.After(g.clk.Now()) || got.After(leadEnd()) {
		t.Fatalf("the head started with its lease until %s, want after now (%s) and by the lead's end %s", got, g.clk.Now(), leadEnd())
	}
	g.round()
	if l := h.leased(); len(l) == 0 || !l[len(l)-1].Equal(leadEnd()) {
		t.Fatalf("a tick renewed the head's lease %v, want until %s last", l, leadEnd())
	}
	last, before := leadEnd(), len(h.leased())
	m102.r.agent.files = failWrites{m102.r.agent.files}
	for i := 0; i < int((e.Lease+e.Skew)/time.Second)+2; i++ {
		g.round()
	}
	for _, until := range h.leased()[before:] {
		if until.After(last) {
			t.Errorf("the head's lease was renewed until %s once the member file could not be written; the lead ended %s", until, last)
		}
	}
	if req := h.stopReq(); req.Reason != "no longer leads" {
		t.Errorf("the head was stopped with %+v, want for no longer leading", req)
	}
}

// TestOperatorAsksToGrowAndHandOver: while the head is busy, the leader
// neither grows back nor hands the lead to a younger member (both wait for
// grow_after of idleness); `llm-upstreams tier grow|handover` writes a
// request the leader acts on at once, draining first (issue 21: what
// operators asked for). A request with nothing to do changes nothing.
func TestOperatorAsksToGrowAndHandOver(t *testing.T) {
	g := newTierRig(t)
	g.busy = true
	g.join("101", 2)
	m102 := g.join("102", 3)
	g.until("member 102 leads on two nodes", func() bool {
		l := g.leader()
		return l == m102 && l.running().Serving == "2 of 3 nodes, context 65536"
	})
	ask := func(action string) {
		if err := NewStore(g.dir, "reasoning", nil).WriteRequest(members.Request{Schema: SchemaVersion, Action: action, At: g.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ask(members.RequestHandover) // no younger member: nothing to do
	g.join("100", 1)             // an older member: the head could grow
	h := m102.running()
	for i := 0; i < 20; i++ {
		g.round()
	}
	if m102.running() != h {
		t.Fatal("the busy leader re-planned or handed over unasked")
	}
	ask(members.RequestGrow)
	g.until("a head on three nodes", func() bool {
		l := g.leader()
		return l == m102 && l.running() != h && l.running().Serving == "3 of 3 nodes, context 131072"
	})
	if req := h.stopReq(); req.SkipDrain || !strings.Contains(string(req.Reason), "asked by an operator") {
		t.Errorf("the head was stopped with %+v, want a drain asked by an operator", req)
	}

	m103 := g.join("103", 4)
	h = m102.running()
	for i := 0; i < 20; i++ {
		g.round()
	}
	if g.leader() != m102 || m102.running() != h {
		t.Fatal("the busy leader handed over unasked")
	}
	ask(members.RequestHandover)
	g.until("the younger member leads", func() bool { return g.leader() == m103 })
	if req := h.stopReq(); req.SkipDrain || !strings.Contains(string(req.Reason), "handing the lead to a younger member (asked by an operator)") {
		t.Errorf("the head was stopped with %+v, want a drain for an asked handover", req)
	}
}
