package elastic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/members"
	"slurm-llm/health"
	"slurm-llm/supervisor"
	"slurm-llm/supervisor/clock"
	"slurm-llm/supervisor/tier"
)

// Head is a head llama-server run by the leader: *supervisor.Runner.
type Head interface {
	Run(ctx context.Context) error
	Stop(supervisor.StopRequest)
	// Lease renews the head's lease (tier.Process.LeaseUntil) until the
	// time until, on this node's clock.
	Lease(until time.Time)
}

// HeadRun is what a head is started for: the term its leader leads, what
// it serves with ("2 of 3 nodes, context 65536"), and its own run id
// (supervisor.Options.RunID), new for every head: a head's endpoint file
// is fenced by run id, and a previous head's removal, queued behind slow
// storage, must not delete the next head's file.
type HeadRun struct {
	Term    int
	Serving string
	RunID   string
}

// Options are what a member runner needs. Config, Self, RunID, Files,
// Launcher and NewHead are required.
type Options struct {
	// Config is the elastic tier's config.
	Config *tier.Config
	// Self is this member: its job, run, node and (resolved) cluster-network
	// address; its rpc-server listens there on Config.Worker.Port.
	Self  tier.Member
	RunID string
	// Files is the shared membership directory (a *Store).
	Files Files
	// Launcher starts this member's rpc-server.
	Launcher supervisor.Launcher
	// StopMargin is how long beyond stop_grace the launcher's Stop may take
	// (tier.ShimMargin for srun steps).
	StopMargin time.Duration
	// NewHead builds the leader's head for a plan: supervisor.New with the
	// launcher, the term, what it serves with and its run id
	// (Options.Term, Serving, RunID).
	NewHead func(plan *tier.Plan, run HeadRun) (Head, error)
	// Observer, if set, gets the member's state changes as runner events
	// (ready once it serves: its rpc-server listens, or its head is ready).
	Observer func(supervisor.Event)
	Clock    clock.Clock
	Log      hclog.Logger
	// Tick is how often the membership is renewed and decided; 1s by
	// default, four times as often while it settles (tickEvery), and ten
	// times as often while a member is leaving.
	Tick time.Duration
	// InFlight counts the head's requests in flight (growing waits for an
	// idle head); by default its /metrics, /slots or router models. It is
	// called off Run's goroutine, bounded by health_timeout.
	InFlight func(ctx context.Context) (int, error)
}

// Runner is one member's life: it renews its member file and decides
// every tick (Agent); while it leads, it runs the head over the other
// members with the plan for that many nodes, and re-plans when a member
// leaves or (when idle long enough) joins; while it follows, it runs its
// rpc-server, restarted for each new term. Stop (a stop notice of its job)
// makes it leave in order. One goroutine, Run's, owns its state.
type Runner struct {
	o     Options
	agent *Agent
	log   hclog.Logger
	stop  chan supervisor.StopRequest
	msgs  chan any
	quit  chan struct{}

	// Owned by Run.
	// ticking: a tick's file I/O is under way (its answer is a tickDone or
	// a takeDone); again: another tick was asked for meanwhile.
	ticking, again bool
	// asking: a count of the head's requests in flight is under way (its
	// answer is a busyMsg).
	asking bool
	worker supervisor.Handle // this member's rpc-server
	// workerGoing is an rpc-server being stopped: nothing that needs its
	// port or its node's GPU starts before it has ended (workerEnded).
	workerGoing  supervisor.Handle
	workerTerm   int  // the term it was started for
	workerUp     bool // it listens
	head         Head
	headCancel   context.CancelFunc
	headUses     []string // job ids of the workers the head runs with
	headNodes    int      // the plan's node count
	headStopping bool
	// handingOver: the head is being stopped so that a younger member leads.
	handingOver bool
	idleSince   time.Time // the head was first answered idle; zero while busy
	leaving     *supervisor.StopRequest
	leaveBy     time.Time
	// policy paces restarts of a failing rpc-server (and gives up);
	// workerRetry is when it may start again.
	policy      *supervisor.RestartPolicy
	workerRetry time.Time
	lastWhy     string
	// askedDone is the time of the last operator request taken (asked),
	// or when the runner was made: older requests are not acted on.
	askedDone time.Time
	// gatherTerm, gatherSince: the term whose head waits for members whose
	// rpc-server is still starting, and since when.
	gatherTerm  int
	gatherSince time.Time
	// ignored are the member-directory files already logged as ignored,
	// with the reason logged: one line per file and reason.
	ignored map[string]string
	done    bool
	err     error
}

// Messages from helper goroutines to Run.
type (
	headEnded   struct{ err error }
	workerEnded struct {
		h   supervisor.Handle
		res supervisor.ExitResult
	}
	tickDone struct{ io TickIO }
	takeDone struct{ io TakeIO }
	// busyMsg is head's count of requests in flight, asked at at.
	busyMsg struct {
		head Head
		at   time.Time
		n    int
		err  error
	}
)

// NewRunner checks that the member can run and returns its runner. A
// member whose node cannot read the model still serves as a worker, but
// never leads (it says so in its member file).
func NewRunner(o Options) (*Runner, error) {
	if o.Config == nil || o.Config.Elastic == nil || o.Files == nil || o.Launcher == nil || o.NewHead == nil {
		return nil, errors.New("elastic member: config, files, launcher and head builder are required")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.InFlight == nil {
		base, client := health.BaseURL(o.Self.Addr, o.Config.Head.Port), supervisor.NewHeadClient()
		o.InFlight = func(ctx context.Context) (int, error) { return health.InFlight(ctx, client, base) }
	}
	e := o.Config.Elastic
	m := Member{Tier: o.Config.Tier, JobID: o.Self.JobID, RestartCount: o.Self.RestartCount, RunID: o.RunID,
		Node: o.Self.Node, Addr: o.Self.Addr, RPCPort: o.Config.Worker.Port, State: StateJoining}
	if err := readable(e.Model); err != nil {
		m.CannotLead, m.Reason = true, "cannot lead: "+err.Error()
		o.Log.Error("the model is not readable on this node: this member serves as a worker only, never leads",
			"model", e.Model, "error", err)
	}
	r := &Runner{o: o, log: o.Log, stop: make(chan supervisor.StopRequest, 4), msgs: make(chan any, 8), quit: make(chan struct{}),
		agent:  NewAgent(o.Files, m, Timing{Lease: e.Lease, Skew: e.Skew, Margin: tier.LeadMargin}, o.Clock.Now),
		policy: supervisor.NewRestartPolicy(o.Config.Restart, rand.Float64), askedDone: o.Clock.Now()}
	return r, nil
}

// readable checks that the model file can be opened for reading here.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// Stop asks the member to leave in order (its job is preempted,
// cancelled, at its time limit); a second request with SkipDrain stops it
// now. It never blocks: with four requests pending, a fifth is dropped and
// logged.
func (r *Runner) Stop(req supervisor.StopRequest) {
	select {
	case r.stop <- req:
	default:
		r.log.Warn("stop request dropped: too many pending", "reason", req.Reason)
	}
}

// Run is the member's life until it has left (nil) or ctx ends (every
// process is stopped at once).
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.quit)
	tick := r.o.Clock.NewTicker(r.o.Tick)
	defer tick.Stop()
	every := r.o.Tick
	r.step()
	for !r.done {
		select {
		case <-ctx.Done():
			r.leaveNow("shutdown")
			return nil
		case req := <-r.stop:
			r.handleStop(req)
			every = r.o.Tick / 10
			tick.Reset(every)
		case m := <-r.msgs:
			r.handleMsg(m)
		case <-tick.C():
			r.step()
		}
		if want := r.tickEvery(); r.leaving == nil && want != every {
			every = want
			tick.Reset(every)
		}
	}
	return r.err
}

// tickEvery is how often to renew and decide: a quarter of Tick while the
// membership is settling (no leader, a leader without its head, a worker
// whose rpc-server is not up), since each step of a takeover waits for the
// others' next tick (measured: a leader's node taken cost ~4 s beyond the
// head's load at 1 s ticks); Tick once it serves, to spare the shared file
// system.
func (r *Runner) tickEvery() time.Duration {
	d := r.agent.Last()
	switch {
	case d.Lead && r.head == nil,
		!d.Lead && d.Leader == nil,
		!d.Lead && (r.worker == nil || !r.workerUp):
		return r.o.Tick / 4
	}
	return r.o.Tick
}

// send hands a message to Run from a helper goroutine, unless Run has
// returned.
func (r *Runner) send(m any) {
	select {
	case r.msgs <- m:
	case <-r.quit:
	}
}

func (r *Runner) handleMsg(m any) {
	switch m := m.(type) {
	case headEnded:
		r.handleHeadEnded(m)
	case workerEnded:
		r.handleWorkerEnded(m)
	case tickDone:
		r.ticking = false
		r.decided(r.agent.Settle(m.io))
	case takeDone:
		r.ticking = false
		r.decided(r.agent.Took(m.io))
	case busyMsg:
		r.handleBusy(m)
	}
}

// step starts a tick: the membership's file I/O runs on a goroutine of its
// own and its answer comes back as a tickDone, so that a shared file
// system that hangs holds up nothing here (the head's lease ends on its
// own, in its shim). While one is under way, the next begins when it ends.
func (r *Runner) step() {
	if r.ticking {
		r.again = true
		return
	}
	r.ticking, r.again = true, false
	job := r.agent.Begin()
	go func() { r.send(tickDone{io: job.Run()}) }()
}

// decided does what a tick's decision says: take the next term (its file
// I/O on a goroutine too, its answer a takeDone), or lead, follow, leave.
func (r *Runner) decided(d Decision) {
	if d.Why != r.lastWhy {
		r.log.Info("membership", "term", d.Term, "lead", d.Lead, "role", d.Role.String(), "why", d.Why)
		r.lastWhy = d.Why
	}
	r.logIgnored(d.Ignored)
	if d.Take {
		r.ticking = true
		job := r.agent.BeginTake(d)
		go func() { r.send(takeDone{io: job.Run()}) }()
		return
	}
	if r.head != nil && d.Lead {
		r.head.Lease(d.LeadEnd)
	}
	now := r.o.Clock.Now()
	switch {
	case r.leaving != nil:
		r.stepLeaving(d, now)
	case d.Lead:
		r.lead(d, now)
	default:
		r.follow(d)
	}
	if r.again && !r.done {
		r.step()
	}
}

// logIgnored logs each ignored member-directory file once per reason.
func (r *Runner) logIgnored(ign []Ignored) {
	if r.ignored == nil {
		r.ignored = map[string]string{}
	}
	for _, i := range ign {
		if r.ignored[i.File] != i.Reason {
			r.log.Warn("member directory: file ignored", "file", i.File, "reason", i.Reason)
			r.ignored[i.File] = i.Reason
		}
	}
}

// lead runs the head over the members the decision lists, re-planning
// when one it uses goes, or (idle for grow_after) when more are up.
func (r *Runner) lead(d Decision, now time.Time) {
	r.stopWorker("this member leads: its node runs the head")
	if r.workerGoing != nil {
		return // the head starts once the rpc-server has left the GPU
	}
	if r.head != nil {
		r.watchHead(d, now)
		return
	}
	r.startHead(d)
}

// watchHead stops the head when a worker it uses is gone or leaving, or
// when it may grow.
func (r *Runner) watchHead(d Decision, now time.Time) {
	if r.headStopping {
		return
	}
	byJob := map[string]Member{}
	for _, w := range d.Workers {
		byJob[w.JobID] = w
	}
	for _, j := range r.headUses {
		if _, ok := byJob[j]; ok {
			continue
		}
		if m, ok := r.member(j); ok && m.State == StateLeaving && m.Live(now) {
			r.log.Warn("a member the head uses is leaving: draining, then re-planning", "member", j, "leave_by", m.LeaveBy)
			r.stopHead(supervisor.StopRequest{Reason: supervisor.StopReason("re-planning: member " + j + " leaves"),
				Since: m.LeaveBy.Add(-r.leaveWindow())})
		} else {
			r.log.Warn("a member the head uses is gone (lease ran out, node lost): re-planning now", "member", j)
			r.stopHead(supervisor.StopRequest{Reason: supervisor.StopReason("re-planning: member " + j + " lost"), SkipDrain: true})
		}
		return
	}
	if r.asked(d, now) {
		return
	}
	if n, _, ok := r.o.Config.Elastic.PlanFor(1 + len(d.Workers)); ok && n > r.headNodes {
		r.maybeGrow(n, now)
		return
	}
	if d.Younger && r.idleFor(now) {
		// Slurm preempts the earliest-submitted job first: a younger member
		// outlasts this one, so it should lead. A handover reloads the
		// model, so it waits for an idle head, like growing.
		r.log.Info("a younger member is up: handing the lead over while idle")
		r.handingOver = true
		r.stopHead(supervisor.StopRequest{Reason: "handing the lead to a younger member", SkipDrain: true})
	}
}

// asked acts on an operator's request (llm-upstreams tier grow|handover,
// members.Request) made since the last one this member took, or since it
// started: what the automatic rule does once the head has been idle for
// grow_after, now, draining first (the requests in flight get the drain's
// budget, counted from now). A request with nothing to do is logged and
// taken. It reports whether the head is being stopped.
func (r *Runner) asked(d Decision, now time.Time) bool {
	q := d.Request
	if q == nil || !q.At.After(r.askedDone) {
		return false
	}
	r.askedDone = q.At
	switch q.Action {
	case members.RequestGrow:
		n, _, ok := r.o.Config.Elastic.PlanFor(1 + len(d.Workers))
		if !ok || n <= r.headNodes {
			r.log.Info("asked to grow, but the head already serves on every member up", "nodes", r.headNodes)
			return false
		}
		r.log.Info("asked to grow: draining, then re-planning to more nodes", "from", r.headNodes, "to", n)
		r.stopHead(supervisor.StopRequest{Reason: supervisor.StopReason(fmt.Sprintf("re-planning to %d nodes (asked by an operator)", n)), Since: now})
	case members.RequestHandover:
		if !d.Younger {
			r.log.Info("asked to hand the lead over, but no younger member is up: this member keeps the lead")
			return false
		}
		r.log.Info("asked to hand the lead over: draining, then handing it to the younger member")
		r.handingOver = true
		r.stopHead(supervisor.StopRequest{Reason: "handing the lead to a younger member (asked by an operator)", Since: now})
	default:
		return false
	}
	return true
}

// idleFor reports whether the head has been idle for grow_after (never
// when grow_after is 0), counting from the first answer that found it
// idle; it asks the head again (askBusy).
func (r *Runner) idleFor(now time.Time) bool {
	after := r.o.Config.Elastic.GrowAfter
	if after <= 0 {
		return false
	}
	r.askBusy()
	return !r.idleSince.IsZero() && now.Sub(r.idleSince) >= after
}

// maybeGrow re-plans to n nodes once the head has been idle for
// grow_after (a re-plan reloads the model), or never when grow_after is 0.
func (r *Runner) maybeGrow(n int, now time.Time) {
	if r.idleFor(now) {
		r.log.Info("idle long enough: re-planning to more nodes", "from", r.headNodes, "to", n)
		r.stopHead(supervisor.StopRequest{Reason: supervisor.StopReason(fmt.Sprintf("re-planning to %d nodes", n)), SkipDrain: true})
	}
}

// askBusy asks the head, on a goroutine, how many requests it has in
// flight, unless a question is under way; the answer comes back as a
// busyMsg. Nothing on Run's goroutine waits for a head: a /metrics that
// answers slowly once held up the renewals of the head's lease until its
// shim killed it (issue 30).
func (r *Runner) askBusy() {
	if r.asking || r.head == nil {
		return
	}
	r.asking = true
	h, at, count, timeout := r.head, r.o.Clock.Now(), r.o.InFlight, r.o.Config.Timeouts.HealthTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		n, err := count(ctx)
		r.send(busyMsg{head: h, at: at, n: n, err: err})
	}()
}

// handleBusy takes a count of the head's requests in flight: a busy head,
// or one that cannot say (unknown is busy), starts the idle count again;
// the first idle answer starts it, from when it was asked.
func (r *Runner) handleBusy(m busyMsg) {
	r.asking = false
	if m.head != r.head {
		return // an answer about a head that is gone
	}
	switch {
	case m.err != nil || m.n > 0:
		r.idleSince = time.Time{}
	case r.idleSince.IsZero():
		r.idleSince = m.at
	}
}

// startHead plans the head for the members up and starts it.
func (r *Runner) startHead(d Decision) {
	var ws []tier.Member
	for _, w := range d.Workers {
		ws = append(ws, tier.Member{JobID: w.JobID, RestartCount: w.RestartCount, Node: w.Node, Addr: w.Addr, Port: w.RPCPort})
	}
	plan, n, err := r.o.Config.LeaderPlan(r.o.Self, ws)
	if errors.Is(err, tier.ErrNotServed) {
		return // too few members up; the next tick looks again
	}
	if err != nil {
		r.log.Error("cannot plan the head", "error", err)
		return
	}
	e := r.o.Config.Elastic
	if r.gather(d, len(ws), n) {
		return
	}
	_, np, _ := e.PlanFor(n)
	serving := fmt.Sprintf("%d of %d nodes, context %d", n, e.Members, np.Ctx)
	if !r.o.Clock.Now().Before(d.LeadEnd) {
		return // no lead left to start a head on; the next tick decides again
	}
	// The head's shim kills it at the lead's end unless renewed (each tick
	// that renews the member lease renews it): a supervisor frozen by
	// SIGSTOP or a hung NFS mount cannot stop its head itself, and the next
	// leader may start its own Skew after the lease ended.
	plan.Head.LeaseUntil = d.LeadEnd
	runID, err := supervisor.NewRunID()
	if err != nil {
		r.log.Error("cannot build the head", "error", err)
		return
	}
	h, err := r.o.NewHead(plan, HeadRun{Term: d.Term, Serving: serving, RunID: runID})
	if err != nil {
		r.log.Error("cannot build the head", "error", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.head, r.headCancel, r.headNodes, r.headStopping, r.idleSince = h, cancel, n, false, time.Time{}
	r.headUses = nil
	for _, w := range ws[:n-1] {
		r.headUses = append(r.headUses, w.JobID)
	}
	r.agent.Using(r.headUses)
	r.log.Info("head starting", "term", d.Term, "serving", serving, "workers", r.headUses, "run_id", runID,
		"lease_until", d.LeadEnd.UTC().Format(time.RFC3339Nano))
	go func() { r.send(headEnded{err: h.Run(ctx)}) }()
}

// gather reports whether the head should wait for members whose
// rpc-server is still starting for this term, rather than start now on n
// nodes: when they would give a larger plan, for at most a lease from the
// first time it waited in this term. Members started together (the tier's
// start, every worker after a handover) are ready within a second or so of
// each other; starting on fewer would cost a second load once grow_after
// has passed (a 72B reload is 45-100 s at the site).
func (r *Runner) gather(d Decision, workers, n int) bool {
	if d.Coming == 0 {
		return false
	}
	more, _, ok := r.o.Config.Elastic.PlanFor(1 + workers + d.Coming)
	if !ok || more <= n {
		return false
	}
	now := r.o.Clock.Now()
	if r.gatherTerm != d.Term {
		r.gatherTerm, r.gatherSince = d.Term, now
		r.log.Info("head waits for members whose rpc-server is starting", "term", d.Term, "ready", workers,
			"starting", d.Coming, "nodes_now", n, "nodes_then", more, "at_most", r.o.Config.Elastic.Lease)
	}
	return now.Sub(r.gatherSince) < r.o.Config.Elastic.Lease
}

// stopHead asks the head to stop; handleHeadEnded follows.
func (r *Runner) stopHead(req supervisor.StopRequest) {
	if r.head == nil {
		return
	}
	r.headStopping = true
	r.head.Stop(req)
}

// handleHeadEnded takes the head's end: the member resigns if it no longer
// leads or is leaving (only now, its head gone, may another start one),
// and says it uses no worker any more.
func (r *Runner) handleHeadEnded(m headEnded) {
	r.headCancel()
	r.head, r.headUses, r.headNodes = nil, nil, 0
	r.agent.Using(nil)
	switch {
	case m.err != nil:
		r.log.Error("head gave up: resigning so that another member may lead", "error", m.err)
		r.agent.Resign()
	case r.handingOver:
		r.agent.Resign()
	}
	r.handingOver = false
	if r.leaving != nil {
		r.agent.Resign()
		r.finish()
	}
}

// follow runs this member's rpc-server for the current term, and resigns a
// leadership it lost (its head stopped first). A member that has just
// taken a term and waits for its member file to say so does neither.
func (r *Runner) follow(d Decision) {
	if r.head != nil {
		r.stopHead(supervisor.StopRequest{Reason: "no longer leads", SkipDrain: true})
		return // resigns once the head has ended
	}
	switch d.Role {
	case RoleLost:
		r.agent.Resign()
	case RoleLeader:
		r.stopWorker("this member has taken the lead: its node runs the head")
		return
	}
	if r.worker != nil && r.workerTerm < d.Term {
		// A head of an older term may still hold it (a leader cut off):
		// restarted, it serves only the new term's head.
		r.stopWorker(fmt.Sprintf("term %d began: no older head may hold it", d.Term))
	}
	if r.worker == nil {
		if r.workerGoing != nil || r.o.Clock.Now().Before(r.workerRetry) {
			return // the old one still holds the port, or a restart waits
		}
		r.startWorker(d.Term)
		return
	}
	if !r.workerUp {
		select {
		case <-r.worker.Listening():
			r.workerUp = true
			r.policy.Healthy(r.o.Clock.Now())
			r.agent.Started(r.workerTerm)
			r.agent.SetState(StateReady, time.Time{}, "")
			r.emit(supervisor.StateReady, "rpc-server listens")
		default:
		}
	}
}

// startWorker starts this member's rpc-server for term.
func (r *Runner) startWorker(term int) {
	proc, err := r.o.Config.MemberWorker(r.o.Self)
	if err != nil {
		r.log.Error("cannot plan the rpc-server", "error", err)
		return
	}
	h, err := r.o.Launcher.Start(proc)
	if err != nil {
		r.log.Error("rpc-server failed to start", "error", err)
		return
	}
	r.worker, r.workerTerm, r.workerUp = h, term, false
	r.agent.SetState(StateJoining, time.Time{}, "")
	r.log.Info("rpc-server started", "term", term, "pid", h.PID())
	go func() {
		<-h.Done()
		r.send(workerEnded{h: h, res: h.Result()})
	}()
}

// stopWorker stops this member's rpc-server on a goroutine (a stop may take
// stop_grace and more: Run's goroutine never waits on it); its end comes
// back as a workerEnded.
func (r *Runner) stopWorker(why string) {
	if r.worker == nil {
		return
	}
	h := r.worker
	r.worker, r.workerUp, r.workerGoing = nil, false, h
	r.log.Info("stopping the rpc-server", "why", why)
	go h.Stop(r.o.Config.Timeouts.StopGrace)
}

// handleWorkerEnded takes an rpc-server's end: expected (stopped) or not;
// an unexpected end is started again at the next tick, as a new member
// (joining, its port checked again by the leader's head start).
func (r *Runner) handleWorkerEnded(m workerEnded) {
	if m.h == r.workerGoing {
		// Stopped on purpose: what waited for it (the head, the next
		// rpc-server) starts at a tick now, not at the next.
		r.workerGoing = nil
		r.step()
		return
	}
	if m.h != r.worker {
		return
	}
	r.log.Warn("rpc-server exited", "cause", m.res.String())
	r.worker, r.workerUp = nil, false
	r.agent.SetState(StateJoining, time.Time{}, "rpc-server exited: "+m.res.String())
	now := r.o.Clock.Now()
	d, delay := r.policy.Decide(supervisor.Failure{Process: "rpc-server", Cause: m.res.String()}, now)
	if d.Action == supervisor.ActionGiveUp {
		r.err = fmt.Errorf("%w: %s", supervisor.ErrGaveUp, d.Reason)
		r.log.Error("gave up", "reason", d.Reason)
		r.leaveNow("gave up: " + d.Reason)
		return
	}
	r.workerRetry = now.Add(delay)
}

// handleStop starts leaving: the member says so in its file at once, so
// that the leader re-plans without it; a leader drains its own head.
func (r *Runner) handleStop(req supervisor.StopRequest) {
	if req.SkipDrain {
		r.leaveNow(string(req.Reason))
		return
	}
	if r.leaving != nil {
		return
	}
	since := req.Since
	if since.IsZero() {
		since = r.o.Clock.Now()
	}
	r.leaving, r.leaveBy = &req, since.Add(r.leaveWindow())
	r.agent.SetState(StateLeaving, r.leaveBy, string(req.Reason))
	r.log.Info("member leaving", "reason", req.Reason, "leave_by", r.leaveBy)
	if r.head != nil {
		r.stopHead(req)
	}
	r.step()
}

// leaveWindow is how long after its stop notice a member may wait for the
// leader to let it go: the drain's in-flight wait, so that its own stop
// still fits in the budget.
func (r *Runner) leaveWindow() time.Duration {
	c := r.o.Config
	return tier.Split(tier.KindSingle, c.Timeouts, c.Drain, r.o.StopMargin).InFlight
}

// stepLeaving lets a leaving worker go once the leader's head no longer
// uses it (or its time is up); a leaving leader waits for its head.
func (r *Runner) stepLeaving(d Decision, now time.Time) {
	if r.head != nil {
		if !now.Before(r.leaveBy) {
			r.stopHead(supervisor.StopRequest{Reason: r.leaving.Reason, SkipDrain: true})
		}
		return
	}
	if d.Leader != nil && slices.Contains(d.Leader.Using, r.o.Self.JobID) && now.Before(r.leaveBy) {
		return // the leader's head still uses this rpc-server
	}
	r.stopWorker("leaving: " + string(r.leaving.Reason))
	r.finish()
}

// leaveNow stops everything at once (a second signal, the context's end),
// and resigns only once the head is gone.
func (r *Runner) leaveNow(why string) {
	r.agent.SetState(StateLeaving, r.o.Clock.Now(), why)
	if r.head != nil {
		r.head.Stop(supervisor.StopRequest{Reason: supervisor.StopReason(why), SkipDrain: true})
		r.headCancel()
		for r.head != nil {
			if m, ok := (<-r.msgs).(headEnded); ok {
				r.handleHeadEnded(m)
			}
		}
	}
	r.stopWorker("leaving now: " + why)
	r.finish()
}

// finish writes the member's last file (leaving, not leading) and ends Run.
// The write waits at most a lease: on storage that hangs, the file's lease
// runs out by itself.
func (r *Runner) finish() {
	if r.workerGoing != nil {
		<-r.workerGoing.Done() // bounded: Stop kills it after its grace
	}
	r.agent.Resign()
	job := r.agent.Begin()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		job.Run()
	}()
	t := r.o.Clock.NewTimer(r.o.Config.Elastic.Lease)
	defer t.Stop()
	select {
	case <-wrote:
	case <-t.C():
		r.log.Warn("the member's last file was not written in time: its lease will run out", "wait", r.o.Config.Elastic.Lease)
	}
	r.done = true
}

// member finds a member in the last read of the directory.
func (r *Runner) member(job string) (Member, bool) {
	for _, m := range r.agent.Members() {
		if m.JobID == job {
			return m, true
		}
	}
	return Member{}, false
}

// emit reports a state to the observer (the job's run record).
func (r *Runner) emit(s supervisor.State, reason string) {
	if r.o.Observer != nil {
		r.o.Observer(supervisor.Event{Time: r.o.Clock.Now(), Kind: supervisor.EventState, State: s, Reason: reason})
	}
}
