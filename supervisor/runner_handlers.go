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

// handleExit takes a process's exit (life.go, onExit, says what follows).
// An exit of an older start of the process is ignored.
func (r *Runner) handleExit(m exitMsg) {
	if mem := r.find(m.name); mem == nil || mem.gen != m.gen {
		return
	}
	r.apply(onExit(r.view(), m.name, m.pid, m.result, r.deps()))
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

// failure takes a process's failure that is no exit (its checks failed;
// life.go, onFailure).
func (r *Runner) failure(m *member, cause string) {
	r.apply(onFailure(r.view(), m.spec.Name, cause, r.deps()))
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

// workerStartFailed takes a worker's failed start that is no exit (not
// ready in time, unreachable from the head; life.go, onStartFail).
func (r *Runner) workerStartFailed(w *member, cause string) {
	r.apply(onStartFail(r.view(), w.spec.Name, cause, r.deps()))
}

// dropWorker leaves w's node out of the tier, or gives up (life.go, onDrop).
func (r *Runner) dropWorker(w *member, why string) {
	r.apply(onDrop(r.view(), w.spec.Name, why, r.deps()))
}

// handleReady takes a worker's readiness (ready pattern or startup probe;
// life.go, onReady). A message of an older start is ignored.
func (r *Runner) handleReady(m readyMsg) {
	if w := r.find(m.name); w == nil || w.gen != m.gen {
		return
	}
	r.apply(onReady(r.view(), m.name, m.how))
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
