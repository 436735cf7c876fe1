package supervisor

import (
	"slices"
	"slurm-llm/supervisor/tier"
	"time"
)

// phase is where one process is in its own life.
type phase int

const (
	phaseDown     phase = iota // not running
	phaseStarting              // launched, not yet ready
	phaseReady                 // ready (worker: listens; head: /health 200)
	phaseStopping              // asked to stop; its exit is expected
)

// member is one process of the tier and everything the runner knows about
// it. Only the Run goroutine touches it.
type member struct {
	spec      tier.Process
	h         Handle
	gen       int // counts starts; messages of an older start are ignored
	phase     phase
	startedAt time.Time
	// startFails counts failed starts in a row (workers).
	startFails int
	// checking: a probe or health check is in flight.
	checking bool
	// head only: last 200 from /health, and whether 503 was logged for this start.
	lastOK        time.Time
	loadingLogged bool
	unhealthy     bool
	// foreignLogged: /health answered before the head held its port, logged.
	foreignLogged bool
	// busySince is when the head was last seen busy and progressing (zero:
	// idle or unknown); work is its work counters then.
	busySince time.Time
	work      float64
	// killing: it was killed (not merely asked to stop) and is on its way out.
	killing bool
	// silentSince is when the startup probes of a worker began to get no
	// answer at all (zero: answered, even with a refusal); silentLogged:
	// that it could not be dropped was logged.
	silentSince  time.Time
	silentLogged bool
	// nodeFault says why its node could not be used at its last failure
	// (Slurm refused the step, the worker could not be reached); "" when
	// that failure says nothing against the node.
	nodeFault string
}

// running reports whether the process exists (starting, ready or stopping).
func (m *member) running() bool { return m.phase != phaseDown }

// applyPlan takes a (re)built plan: members are kept by name so that a
// running worker stays running, new ones are added, missing ones retired.
func (r *Runner) applyPlan(p *tier.Plan) {
	r.plan = p
	old := map[string]*member{}
	for _, w := range r.workers {
		old[w.spec.Name] = w
	}
	if r.head == nil {
		r.head = &member{}
	}
	r.head.spec = p.Head
	r.workers = nil
	for _, spec := range p.Workers {
		m, ok := old[spec.Name]
		if !ok {
			m = &member{}
		}
		delete(old, spec.Name)
		if ok && m.running() && !slices.Equal(m.spec.Argv, spec.Argv) {
			r.stopProcess(m, "its command line changed")
		}
		m.spec = spec
		r.workers = append(r.workers, m)
	}
	for _, m := range old {
		r.retired = append(r.retired, m)
	}
}

// find returns the member (active or retired) with the given name.
func (r *Runner) find(name string) *member {
	if r.head.spec.Name == name {
		return r.head
	}
	for _, list := range [][]*member{r.workers, r.retired} {
		for _, m := range list {
			if m.spec.Name == name {
				return m
			}
		}
	}
	return nil
}

// reconcile starts what should run now: dead workers once the head is
// down (a head must not outlive a worker it is connected to: its next
// request would abort it), then the head once every worker is ready.
func (r *Runner) reconcile() {
	if r.state != StateStarting && r.state != StateReady && r.state != StateRecovering {
		return
	}
	if now := r.clock.Now(); now.Before(r.restartAt) {
		r.armWake(r.restartAt.Sub(now))
		return
	}
	allReady := true
	for _, w := range r.workers {
		allReady = allReady && w.phase == phaseReady
	}
	if !allReady {
		if r.head.running() {
			r.killProcess(r.head, "a worker is down: the head cannot serve without it")
			return
		}
		for _, w := range r.workers {
			if w.phase == phaseDown {
				r.start(w)
			}
		}
		return
	}
	if !r.head.running() && !r.leaseEnded() {
		r.start(r.head)
	}
}

// armWake makes the wake timer fire after d (one timer, reset each time).
func (r *Runner) armWake(d time.Duration) {
	if !r.wake.Stop() {
		select {
		case <-r.wake.C():
		default:
		}
	}
	r.wake.Reset(d)
}

// start launches m. A launch error is reported like an exit, through the
// message channel, so that it takes the same path as any failure.
func (r *Runner) start(m *member) {
	m.gen++
	m.phase, m.startedAt, m.checking = phaseStarting, r.clock.Now(), false
	if m == r.head {
		r.inFlight = nil // a new head: nothing known of its requests yet
		if !r.leaseUntil.IsZero() {
			m.spec.LeaseUntil = r.leaseUntil // the latest renewal, not the plan's
		}
	}
	m.lastOK, m.loadingLogged, m.unhealthy, m.foreignLogged = time.Time{}, false, false, false
	m.busySince, m.work, m.killing = time.Time{}, 0, false
	m.silentSince, m.silentLogged, m.nodeFault = time.Time{}, false, ""
	h, err := r.opts.Launcher.Start(m.spec)
	if err != nil {
		m.h = nil
		r.log.Error("process failed to start", "process", m.spec.Name, "node", m.spec.Node, "error", err)
		gen := m.gen
		go r.send(exitMsg{name: m.spec.Name, gen: gen, result: ExitResult{Code: -1, Err: err}})
		return
	}
	m.h = h
	r.log.Info("process started", "process", m.spec.Name, "node", m.spec.Node, "pid", h.PID(), "log", m.spec.LogPath)
	r.emit(Event{Kind: EventStarted, Process: m.spec.Name, PID: h.PID()})
	go r.watchProc(m.spec.Name, m.gen, h)
}

// watchProc reports a process's readiness (ready pattern), the workers it
// could not reach, and its exit.
func (r *Runner) watchProc(name string, gen int, h Handle) {
	ready := h.Ready()
	for {
		select {
		case <-ready:
			ready = nil
			r.send(readyMsg{name: name, gen: gen, how: "ready pattern seen"})
		case addr := <-h.Unreachable():
			r.send(unreachableMsg{name: name, gen: gen, addr: addr})
		case <-h.Done():
			r.send(exitMsg{name: name, gen: gen, pid: h.PID(), result: h.Result()})
			return
		}
	}
}

// stopProcess asks m to stop, without waiting: its exit arrives as a
// message and, being expected, counts as no failure.
func (r *Runner) stopProcess(m *member, reason string) {
	if m.phase == phaseStopping || m.phase == phaseDown {
		return
	}
	if m.h == nil {
		m.phase = phaseDown
		return
	}
	m.phase = phaseStopping
	r.log.Info("stopping process", "process", m.spec.Name, "reason", reason)
	r.emit(Event{Kind: EventStopping, Process: m.spec.Name, Reason: reason})
	go m.h.Stop(r.plan.Timeouts.StopGrace)
}

// killProcess ends m at once (SIGKILL, through Slurm for a step), without
// waiting: its exit arrives as a message and, being expected, counts as no
// failure.
func (r *Runner) killProcess(m *member, reason string) {
	if m.phase == phaseDown || m.killing {
		return
	}
	if m.h == nil {
		m.phase = phaseDown
		return
	}
	m.phase, m.killing = phaseStopping, true
	r.log.Warn("killing process at once", "process", m.spec.Name, "reason", reason)
	r.emit(Event{Kind: EventStopping, Process: m.spec.Name, Reason: reason})
	go m.h.Kill()
}

// updatePoll sets the poll ticker's period for the current phase: fast
// while something starts, InFlightPoll while draining, HealthInterval else.
func (r *Runner) updatePoll() {
	every := r.plan.Timeouts.HealthInterval
	switch {
	case r.state == StateDraining:
		every = r.plan.Drain.InFlightPoll
	case r.head.phase == phaseStarting:
		every = r.opts.StartupPoll
	default:
		for _, w := range r.workers {
			if w.phase == phaseStarting {
				every = r.opts.StartupPoll
			}
		}
	}
	if every != r.pollEvery {
		r.pollEvery = every
		r.poll.Reset(every)
	}
}
