package supervisor

import (
	"fmt"
	"time"

	"slurm-llm/supervisor/tier"
)

// The tier's transitions, as elastic.Decide reads for the elastic tier: a
// view of the tier and one event in, the steps to take out, in order. The
// rules below are pure (the clock is in the view; the restart policy and
// the replanner are inputs), so every transition is a table-test row
// (life_test.go) and an event reads top to bottom here. The Run goroutine
// builds the view (Runner.view), asks the rule and applies the steps
// (Runner.apply); it decides nothing itself.

// lifeView is what the rules see of the tier at an event.
type lifeView struct {
	Now   time.Time
	State State
	Head  procView
	// Workers are the plan's workers; Retired the processes of an older
	// plan still on their way out.
	Workers, Retired []procView
	// MinWorkers and StartFailLimit are the plan's min_workers and
	// worker_start_failures (0: no limit).
	MinWorkers, StartFailLimit int
	// Split is the stop budget's split (in flight, stop); IdleUnroute the
	// wait of an idle stop for the controller to unroute it.
	Split       tier.DrainSplit
	IdleUnroute time.Duration
}

// procView is one process as the rules see it.
type procView struct {
	Name, Node string
	Phase      phase
	StartFails int
}

// proc returns the process named name (head first, then the workers, then
// the retired ones), and whether it is the head.
func (v lifeView) proc(name string) (p procView, isHead, ok bool) {
	if v.Head.Name == name {
		return v.Head, true, true
	}
	for _, list := range [][]procView{v.Workers, v.Retired} {
		for _, w := range list {
			if w.Name == name {
				return w, false, true
			}
		}
	}
	return procView{}, false, false
}

// lifeDeps are the decisions the rules ask of others.
type lifeDeps struct {
	// Policy is the restart policy's answer to a failure at now.
	Policy func(f Failure, now time.Time) (Decision, time.Duration)
	// Replan builds the plan for fewer worker nodes; nil: a worker node is
	// never dropped.
	Replan func(workers []string) (*tier.Plan, error)
}

// stepKind names what a step does; Runner.apply carries it out.
type stepKind string

const (
	stepExited     stepKind = "exited"       // Proc ended (PID, Result); Failure: it counts as one
	stepState      stepKind = "state"        // the tier goes to To for Reason
	stepGiveUp     stepKind = "give up"      // end the run for Reason, blaming Proc's node if it was at fault
	stepRestartAt  stepKind = "restart at"   // restart (reconcile) no earlier than Delay from now
	stepRecheck    stepKind = "recheck"      // ready workers but Proc are checked again before a new head
	stepKill       stepKind = "kill"         // SIGKILL Proc now (Reason)
	stepStop       stepKind = "stop"         // ask Proc to stop (Reason)
	stepStartFail  stepKind = "start failed" // count a failed start of Proc
	stepDropped    stepKind = "dropped"      // Proc's node leaves the tier (Reason; Nodes left)
	stepApplyPlan  stepKind = "apply plan"   // take Plan
	stepReady      stepKind = "ready"        // worker Proc is ready (Reason: how it was seen)
	stepReconcile  stepKind = "reconcile"    // start what should run now
	stepDrain      stepKind = "drain"        // begin the ordered stop Drain
	stepWaitDrain  stepKind = "wait drain"   // wait for the head's requests in flight
	stepUpdateStop stepKind = "update stop"  // a later request's reason or earlier budget start (Req)
	stepStopAgain  stepKind = "stop again"   // a second stop: do not wait
	stepFinish     stepKind = "finish"       // stop everything in order, end the run
)

// lifeStep is one thing to do; which fields count depends on Kind.
type lifeStep struct {
	Kind    stepKind
	Proc    string
	To      State
	Reason  string
	Delay   time.Duration
	PID     int
	Result  ExitResult
	Failure bool
	Nodes   []string
	Plan    *tier.Plan
	Drain   drainState
	Req     StopRequest
}

// onExit: a process of the tier ended. Its exit is expected when the
// runner had asked it to stop, and during a drain (everything is being
// stopped); else it is a failure: the head's is restarted alone (the
// workers keep running and take the new head's connection), a starting
// worker's counts a failed start, a running worker's takes the head down
// with it (slurm-facts 13).
func onExit(v lifeView, name string, pid int, res ExitResult, d lifeDeps) []lifeStep {
	p, isHead, ok := v.proc(name)
	if !ok {
		return nil
	}
	failed := p.Phase != phaseStopping && v.State != StateDraining
	steps := []lifeStep{{Kind: stepExited, Proc: name, PID: pid, Result: res, Failure: failed}}
	if !failed {
		return append(steps, lifeStep{Kind: stepReconcile})
	}
	cause := "exited: " + res.String()
	if !isHead && p.Phase == phaseStarting {
		return append(steps, onStartFail(v, name, cause, d)...)
	}
	return append(steps, onFailure(v, name, cause, d)...)
}

// onFailure: a process failed (an exit, or checks that failed). The tier
// is out of service; the restart policy says whether to go on, and after
// what delay. A worker's failure ends the head at once: with the model
// split by layers every token passes every worker, so its next request
// aborts it (slurm-facts 13) and no request in flight can finish; a
// graceful stop would only add its grace to the recovery. The ready
// workers are checked again before a new head (slurm-facts 12: possible
// only while no head holds them).
func onFailure(v lifeView, name, cause string, d lifeDeps) []lifeStep {
	f := Failure{Process: name, Cause: cause}
	steps := []lifeStep{{Kind: stepState, To: StateRecovering, Reason: f.String()}}
	dec, delay := d.Policy(f, v.Now)
	if dec.Action == ActionGiveUp {
		return append(steps, lifeStep{Kind: stepGiveUp, Proc: name, Reason: dec.Reason})
	}
	steps = append(steps, lifeStep{Kind: stepRecheck, Proc: name})
	if name != v.Head.Name && v.Head.Phase != phaseDown {
		steps = append(steps, lifeStep{Kind: stepKill, Proc: v.Head.Name,
			Reason: "worker " + name + " failed: the head cannot serve without it"})
	}
	return append(steps, lifeStep{Kind: stepRestartAt, Proc: name, Delay: delay}, lifeStep{Kind: stepReconcile})
}

// onStartFail: a worker failed to start. After worker_start_failures in a
// row its node is dropped; before, it is a failure like any other.
func onStartFail(v lifeView, name, cause string, d lifeDeps) []lifeStep {
	p, _, _ := v.proc(name)
	fails := p.StartFails + 1
	steps := []lifeStep{{Kind: stepStartFail, Proc: name}}
	if v.StartFailLimit > 0 && fails >= v.StartFailLimit {
		return append(steps, onDrop(v, name, fmt.Sprintf("failed to start %d times in a row, last %s", fails, cause), d)...)
	}
	return append(steps, onFailure(v, name, "failed to start: "+cause, d)...)
}

// onDrop: a worker's node cannot serve (why). The tier goes on without it
// when min_workers still holds and a plan for the nodes left exists (the
// --rpc list and the split change, so the head restarts); else the run
// gives up, blaming that node when it was at fault.
func onDrop(v lifeView, name, why string, d lifeDeps) []lifeStep {
	var left []string
	for _, w := range v.Workers {
		if w.Name != name {
			left = append(left, w.Node)
		}
	}
	if len(left) < v.MinWorkers || len(left) == 0 || d.Replan == nil {
		return []lifeStep{{Kind: stepGiveUp, Proc: name, Reason: fmt.Sprintf("worker %s %s; %d workers would be left, min_workers is %d",
			name, why, len(left), v.MinWorkers)}}
	}
	np, err := d.Replan(left)
	if err != nil {
		return []lifeStep{{Kind: stepGiveUp, Proc: name, Reason: fmt.Sprintf("worker %s %s; cannot plan without it: %v", name, why, err)}}
	}
	return []lifeStep{
		{Kind: stepState, To: StateRecovering, Reason: "worker " + name + " dropped: " + why},
		{Kind: stepDropped, Proc: name, Reason: why, Nodes: left},
		{Kind: stepStop, Proc: name, Reason: "dropped"},
		{Kind: stepStop, Proc: v.Head.Name, Reason: "worker set changed"},
		{Kind: stepApplyPlan, Plan: np},
		{Kind: stepReconcile},
	}
}

// onReady: a starting worker was seen ready (how: its ready pattern, or
// its port accepting connections); the head starts once all are. The
// head's readiness is its /health (runner_health.go).
func onReady(v lifeView, name, how string) []lifeStep {
	p, isHead, ok := v.proc(name)
	if !ok || isHead || p.Phase != phaseStarting {
		return nil
	}
	return []lifeStep{{Kind: stepReady, Proc: name, Reason: how}, {Kind: stepReconcile}}
}

// onStop: an ordered stop was asked for (a preemption or cancellation
// notice, the time limit, a signal, an idle extra). The endpoint goes
// draining at once; the head's requests in flight are waited for until the
// split's in-flight share of the budget has passed since the notice (or
// Slurm's PreemptTime, when earlier), then everything stops, head first.
// An idle stop first waits for the controller to unroute it. A stop asked
// for during the drain may bring a better reason or an earlier start of
// the budget, or cut the wait (a second signal).
func onStop(v lifeView, req StopRequest) []lifeStep {
	if v.State == StateDraining {
		steps := []lifeStep{{Kind: stepUpdateStop, Req: req}}
		if req.SkipDrain {
			steps = append(steps, lifeStep{Kind: stepStopAgain}, lifeStep{Kind: stepFinish})
		}
		return steps
	}
	since := req.Since
	if since.IsZero() {
		since = v.Now
	}
	ds := drainState{req: req, since: since, deadline: since.Add(v.Split.InFlight)}
	if req.Reason == ReasonIdle {
		ds.notBefore = since.Add(v.IdleUnroute)
		ds.deadline = ds.deadline.Add(v.IdleUnroute)
	}
	steps := []lifeStep{{Kind: stepDrain, Drain: ds}, {Kind: stepState, To: StateDraining, Reason: string(req.Reason)}}
	if req.SkipDrain || v.Head.Phase != phaseReady {
		return append(steps, lifeStep{Kind: stepFinish})
	}
	return append(steps, lifeStep{Kind: stepWaitDrain})
}
