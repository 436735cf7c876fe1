package supervisor

import (
	"slurm-llm/health"
	"strings"
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

// handleReady takes a worker's readiness (ready pattern or startup probe;
// life.go, onReady). A message of an older start is ignored.
func (r *Runner) handleReady(m readyMsg) {
	if w := r.find(m.name); w == nil || w.gen != m.gen {
		return
	}
	r.apply(onReady(r.view(), m.name, m.how))
}

// handleUnreachable takes a head's report that it could not connect to a
// worker (life.go, onUnreachable). A report of an older head is ignored.
func (r *Runner) handleUnreachable(m unreachableMsg) {
	if m.name != r.head.spec.Name || m.gen != r.head.gen {
		return
	}
	r.apply(onUnreachable(r.view(), m.addr, r.deps()))
}

// handleProbe takes the result of a startup TCP probe of a worker (life.go,
// onProbe). A probe of an older start is ignored.
func (r *Runner) handleProbe(m probeMsg) {
	w := r.find(m.name)
	if w == nil || w.gen != m.gen {
		return
	}
	w.checking = false
	res := probeAnswered
	switch {
	case m.err == nil:
	case health.Silent(m.err):
		res = probeSilent
	default:
		res = probeRefused
	}
	r.apply(onProbe(r.view(), m.name, res, m.err, r.deps()))
}
