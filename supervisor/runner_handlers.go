package supervisor

import (
	"fmt"
	"net"
	"slurm-llm/health"
	"strconv"
	"strings"
	"time"
)

// Messages from helper goroutines to the Run goroutine. gen is the start
// they belong to; a message about an older start is ignored.
type (
	exitMsg struct {
		name   string
		gen    int
		pid    int
		result ExitResult
	}
	readyMsg struct {
		name string
		gen  int
		how  string
	}
	probeMsg struct {
		name string
		gen  int
		err  error
	}
	unreachableMsg struct {
		name string
		gen  int
		addr string
	}
)

// handleExit takes a process's exit: expected (the runner stopped it) or a
// failure of a worker or of the head.
func (r *Runner) handleExit(m exitMsg) {
	mem := r.find(m.name)
	if mem == nil || mem.gen != m.gen {
		return
	}
	was := mem.phase
	mem.phase, mem.h, mem.checking = phaseDown, nil, false
	kind := "unexpected"
	if was == phaseStopping {
		kind = "expected"
	}
	r.emit(Event{Kind: EventExited, Process: m.name, PID: m.pid, Result: m.result, Reason: kind})
	if was == phaseStopping || r.state == StateDraining {
		r.log.Info("process exited", "process", m.name, "pid", m.pid, "cause", m.result.String(), "expected", was == phaseStopping)
		r.reconcile()
		return
	}
	r.log.Warn("process exited", "process", m.name, "node", mem.spec.Node, "pid", m.pid, "cause", m.result.String(),
		"exit_code", m.result.Code, "signal", int(m.result.Signal), "oom", m.result.OOM)
	mem.nodeFault = stepRefusal(m.result)
	cause := "exited: " + m.result.String()
	switch {
	case mem == r.head:
		r.handleHeadExit(cause)
	case was == phaseStarting:
		r.workerStartFailed(mem, cause)
	default:
		r.failure(mem, cause)
	}
}

// stepRefusal says why an exit shows the process's node unusable: Slurm
// would not create its step there (N6: "Requested node configuration is
// not available" on a node the job holds). A step refused because the job
// is ending says nothing about the node: "".
func stepRefusal(r ExitResult) string {
	if r.StepRefused == "" || strings.Contains(r.StepRefused, "completing or completed") {
		return ""
	}
	return "Slurm refused to create the step there: " + r.StepRefused
}

// handleHeadExit restarts the head alone: the workers keep running and
// take the new head's connection.
func (r *Runner) handleHeadExit(cause string) {
	r.failure(r.head, cause)
}

// failure takes the tier out of service, asks the restart policy, and
// either gives up or schedules the restart (reconcile does it once the
// backoff has passed; for a worker, the head is stopped first).
func (r *Runner) failure(m *member, cause string) {
	f := Failure{Process: m.spec.Name, Cause: cause}
	r.setState(StateRecovering, f.String())
	d, delay := r.policy.Decide(f, r.clock.Now())
	if d.Action == ActionGiveUp {
		r.giveUp(m, d.Reason)
		return
	}
	r.restartAt = r.clock.Now().Add(delay)
	r.recheckWorkers(m)
	if m != r.head && r.head.running() {
		// The head can serve nothing more: with the model split by layers
		// every token passes every worker, so its next request aborts it
		// (slurm-facts 13) and no request in flight can finish. A graceful
		// stop only adds its grace to the recovery.
		r.killProcess(r.head, "worker "+m.spec.Name+" failed: the head cannot serve without it")
	}
	if delay > 0 {
		r.log.Info("restart scheduled", "process", m.spec.Name, "delay", delay)
	}
	r.reconcile()
}

// recheckWorkers puts the ready workers but failed back to starting, so
// that their ports are checked again (possible only while no head holds
// them, slurm-facts 12) before a new head is started: a worker whose node
// or link went silent is caught by the check, before a new head waits on
// it (a head's connect to a silent worker waits out the kernel's SYN
// retries, ~2 min, then goes on without it). Workers without a port are
// trusted as they are.
func (r *Runner) recheckWorkers(failed *member) {
	now := r.clock.Now()
	for _, w := range r.workers {
		if w != failed && w.phase == phaseReady && w.spec.Port > 0 {
			w.phase, w.startedAt, w.checking = phaseStarting, now, false
		}
	}
}

// workerStartFailed counts a worker's failed start; after
// WorkerStartFailures in a row its node is dropped (or the supervisor gives
// up when too few workers would be left).
func (r *Runner) workerStartFailed(w *member, cause string) {
	w.startFails++
	limit := r.plan.Restart.WorkerStartFailures
	if limit > 0 && w.startFails >= limit {
		r.dropWorker(w, fmt.Sprintf("failed to start %d times in a row, last %s", w.startFails, cause))
		return
	}
	r.failure(w, "failed to start: "+cause)
}

// dropWorker leaves w's node out of the tier if MinWorkers still hold,
// rebuilding the plan (--rpc and the split change), else gives up.
func (r *Runner) dropWorker(w *member, why string) {
	var remaining []string
	for _, o := range r.workers {
		if o != w {
			remaining = append(remaining, o.spec.Node)
		}
	}
	if len(remaining) < r.plan.MinWorkers || len(remaining) == 0 || r.opts.Replan == nil {
		r.giveUp(w, fmt.Sprintf("worker %s %s; %d workers would be left, min_workers is %d",
			w.spec.Name, why, len(remaining), r.plan.MinWorkers))
		return
	}
	np, err := r.opts.Replan(remaining)
	if err != nil {
		r.giveUp(w, fmt.Sprintf("worker %s %s; cannot plan without it: %v", w.spec.Name, why, err))
		return
	}
	r.setState(StateRecovering, "worker "+w.spec.Name+" dropped: "+why)
	r.log.Warn("worker dropped", "process", w.spec.Name, "node", w.spec.Node, "workers_left", strings.Join(remaining, ","))
	r.emit(Event{Kind: EventDropped, Process: w.spec.Name, Reason: why})
	r.stopProcess(w, "dropped")
	r.stopProcess(r.head, "worker set changed")
	r.applyPlan(np)
	r.reconcile()
}

// handleReady marks a worker ready (ready pattern or startup probe) and
// starts the head when it was the last one.
func (r *Runner) handleReady(m readyMsg) {
	w := r.find(m.name)
	if w == nil || w == r.head || w.gen != m.gen || w.phase != phaseStarting {
		return
	}
	w.phase, w.startFails = phaseReady, 0
	r.log.Info("worker ready", "process", w.spec.Name, "node", w.spec.Node, "how", m.how,
		"after", r.clock.Now().Sub(w.startedAt).Round(time.Millisecond))
	r.emit(Event{Kind: EventReady, Process: w.spec.Name, Reason: m.how})
	r.reconcile()
}

// handleUnreachable takes a head's report that it could not connect to a
// worker: real llama-server then loads and serves without it, on fewer
// devices than planned (a 72B model may not even fit). The head is killed
// and the worker counts a failed start (it is restarted, and dropped after
// worker_start_failures if it stays unreachable: its node or link is down).
func (r *Runner) handleUnreachable(m unreachableMsg) {
	if m.name != r.head.spec.Name || m.gen != r.head.gen || !r.head.running() || r.state == StateDraining {
		return
	}
	for _, w := range r.workers {
		if net.JoinHostPort(w.spec.Addr, strconv.Itoa(w.spec.Port)) != m.addr {
			continue
		}
		r.log.Warn("the head could not connect to a worker: it would serve without it", "process", w.spec.Name, "addr", m.addr)
		r.killProcess(r.head, "could not connect to worker "+w.spec.Name)
		r.stopProcess(w, "unreachable from the head")
		w.nodeFault = "the head could not connect to its worker at " + m.addr
		r.workerStartFailed(w, "unreachable from the head ("+m.addr+")")
		return
	}
	r.log.Warn("the head could not connect to an address that is no worker of the plan", "addr", m.addr)
}

// handleProbe takes the result of a startup TCP probe of a worker.
func (r *Runner) handleProbe(m probeMsg) {
	w := r.find(m.name)
	if w == nil || w.gen != m.gen {
		return
	}
	w.checking = false
	switch {
	case m.err == nil:
		r.handleReady(readyMsg{name: m.name, gen: m.gen, how: "port accepts connections"})
	case !health.Silent(m.err):
		w.silentSince = time.Time{} // its node answers: it is starting
	case w.silentSince.IsZero():
		w.silentSince = r.clock.Now()
	case r.clock.Now().Sub(w.silentSince) >= silentAfter:
		r.workerSilent(w, m.err)
	}
}

// silentAfter is how long the startup probes of a worker may get no answer
// at all before its node counts as cut off. A node that is up answers a
// probe at once, with a refusal if the worker does not listen yet.
const silentAfter = 3 * time.Second

// workerSilent takes a worker whose node has not answered its probes for
// silentAfter: its link or its node is down, and restarting the worker
// cannot help, so it is dropped at once when min_workers leaves room
// (rather than after worker_start_failures starts of worker_start each).
// Without room it keeps the usual path: the link may come back within
// worker_start (scripts/FACTS-cluster.md L6).
func (r *Runner) workerSilent(w *member, err error) {
	if len(r.workers)-1 >= max(r.plan.MinWorkers, 1) && r.opts.Replan != nil {
		r.dropWorker(w, fmt.Sprintf("unreachable from the batch node for %s (no answer at all: its link or node is down, a restart cannot help)", silentAfter))
		return
	}
	if !w.silentLogged {
		w.silentLogged = true
		r.log.Warn("a worker's node does not answer (its link or node is down?); min_workers leaves no room to drop it",
			"process", w.spec.Name, "node", w.spec.Node, "error", err, "worker_start", r.plan.Timeouts.WorkerStart)
	}
}
