package supervisor

import (
	"fmt"
	"strings"
	"time"

	"slurm-llm/supervisor/tier"
)

// The tier's transitions, as elastic.Decide reads for the elastic tier: a
// view of the tier and one event in, the steps to take out, in order. The
// rules below are pure (the clock is in the view; the restart policy and
// the replanner are inputs), so every transition is a table-test row
// (life_test.go) and an event reads top to bottom here. The Run goroutine
// builds the view (Runner.view), asks the rule and applies the steps
// (Runner.apply); it decides nothing itself. The events are a process's
// exit, readiness, failure and dropped node, a stop request, and the
// checks' results: the poll's deadlines (onWorkerDeadline,
// onHeadDeadline), a startup probe (onProbe), the head's load (onLoad:
// stall and idle exit), a silent link (onSilentLink), a worker the head
// could not reach (onUnreachable), the drain's counts (onDrainPoll,
// onInFlight) and the end of its slot saves (onSaved). Starting the checks themselves (HTTP, probes, the kernel's
// TCP table) is the runner's, off its goroutine.

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
	// Timeouts are the plan's (worker_start, load, unhealthy_after, stall).
	Timeouts tier.Timeouts
	// Drain is the ordered stop under way, while draining.
	Drain drainState
	// SaveSlots: the drain saves the head's slots before it stops it
	// ([head] slot_save_dir).
	SaveSlots bool
	// IdleExit is the idle exit of an extra replica (0: none); IdleSince
	// when its head, serving, was first counted idle (zero: not idle).
	IdleExit  time.Duration
	IdleSince time.Time
}

// procView is one process as the rules see it.
type procView struct {
	Name, Node string
	// Addr is where it listens, host:port.
	Addr       string
	Phase      phase
	StartFails int
	// SilentLogged (worker): that it could not be dropped for its silence
	// was logged.
	SilentLogged bool
	// StartedAt is when it was last started. LastOK (head) is its last
	// /health 200; SilentSince (worker) when its startup probes began to
	// get no answer at all (zero: answered).
	StartedAt, LastOK, SilentSince time.Time
	// BusySince (head) is when it was last seen busy and progressing
	// (zero: idle or unknown); Work its work counters then.
	BusySince time.Time
	Work      float64
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
	stepGiveUp     stepKind = "give up"      // end the run for Reason, blaming Proc's node if it was at fault (a state failed follows)
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
	stepFinish     stepKind = "finish"       // stop everything in order, end the run (stepStopped follows)
	stepStopped    stepKind = "stopped"      // the tier is stopped, for the stop's reason (a later one taken while stopping)
	stepHeadReady  stepKind = "head ready"   // the head Proc answers /health 200 since At (a state ready follows)
	stepNodeFault  stepKind = "node fault"   // Proc's node is at fault for its failure (Reason: why)
	stepProgress   stepKind = "progress"     // the head's work: Work, busy since At (zero: idle)
	stepIdleSince  stepKind = "idle since"   // the tier's head counted idle since At (zero: not idle)
	stepIdleExit   stepKind = "idle exit"    // an extra replica idle for Delay ends (an ordered stop follows)
	stepHung       stepKind = "hung"         // the head is hung (Reason; N in flight, no progress for Delay, Err)
	stepLinkSilent stepKind = "link silent"  // the head's link to the workers Nodes is silent
	stepCount      stepKind = "count"        // ask the head how many requests it has in flight
	stepCounted    stepKind = "counted"      // a count came back: N in flight, or Err
	stepUnsure     stepKind = "unsure"       // the drain cannot count (Err): it waits as if busy
	stepSure       stepKind = "sure"         // the drain counts again: N in flight
	stepIdle       stepKind = "idle"         // nothing in flight: the drain's wait ends
	stepSpent      stepKind = "spent"        // the drain's budget is spent
	stepSilentAt   stepKind = "silent at"    // worker Proc's probes get no answer at all since At (zero: answered)
	stepNoRoom     stepKind = "no room"      // worker Proc is silent, but min_workers leaves no room to drop it (Err)
	stepUnreached  stepKind = "unreached"    // the head could not connect to Reason (worker Proc; "": no worker)
	stepSave       stepKind = "save"         // save the head's idle slots that hold a conversation, by At
	stepSaved      stepKind = "saved"        // the saves ended: N saved, Err
	stepSaveLate   stepKind = "save late"    // the saves did not end by their deadline: the stop goes on
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
	At      time.Time
	Work    float64
	N       int
	Err     error
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
		return append(steps, giveUp(name, dec.Reason)...)
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
		return giveUp(name, fmt.Sprintf("worker %s %s; %d workers would be left, min_workers is %d",
			name, why, len(left), v.MinWorkers))
	}
	np, err := d.Replan(left)
	if err != nil {
		return giveUp(name, fmt.Sprintf("worker %s %s; cannot plan without it: %v", name, why, err))
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

// giveUp ends the run for reason, blaming name's node when it was at
// fault: the tier fails.
func giveUp(name, reason string) []lifeStep {
	return []lifeStep{{Kind: stepGiveUp, Proc: name, Reason: reason}, {Kind: stepState, To: StateFailed, Reason: reason}}
}

// finish stops everything in order and ends the run: the tier is stopped.
func finish() []lifeStep {
	return []lifeStep{{Kind: stepFinish}, {Kind: stepStopped}}
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

// onHeadReady: the starting head answered /health 200 from the port it
// holds (runner_health.go checks that it is its own); the tier is ready.
func onHeadReady(v lifeView) []lifeStep {
	if v.Head.Phase != phaseStarting {
		return nil
	}
	return []lifeStep{{Kind: stepHeadReady, Proc: v.Head.Name, At: v.Now}, {Kind: stepState, To: StateReady, Reason: "head answers /health"}}
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
			steps = append(append(steps, lifeStep{Kind: stepStopAgain}), finish()...)
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
	if v.SaveSlots {
		ds.saveBy = ds.deadline.Add(v.Split.Save)
	}
	steps := []lifeStep{{Kind: stepDrain, Drain: ds}, {Kind: stepState, To: StateDraining, Reason: string(req.Reason)}}
	if req.SkipDrain || v.Head.Phase != phaseReady {
		return append(steps, finish()...)
	}
	return append(steps, lifeStep{Kind: stepWaitDrain})
}

// onWorkerDeadline: a worker still starting worker_start after its start
// failed to start; when none of its startup probes got any answer, its
// node is at fault (unreachable, not slow).
func onWorkerDeadline(v lifeView, name string, d lifeDeps) []lifeStep {
	p, isHead, ok := v.proc(name)
	limit := v.Timeouts.WorkerStart
	if !ok || isHead || p.Phase != phaseStarting || v.Now.Sub(p.StartedAt) <= limit {
		return nil
	}
	steps := []lifeStep{{Kind: stepStop, Proc: name, Reason: "not ready in time"}}
	if !p.SilentSince.IsZero() {
		steps = append(steps, lifeStep{Kind: stepNodeFault, Proc: name,
			Reason: fmt.Sprintf("no answer at all to the worker's startup probes for %s", v.Now.Sub(p.SilentSince).Round(time.Second))})
	}
	return append(steps, onStartFail(v, name, fmt.Sprintf("not ready after %s", limit), d)...)
}

// onHeadDeadline: a head still loading after load, or serving with no
// /health 200 for unhealthy_after, is stopped and fails.
func onHeadDeadline(v lifeView, d lifeDeps) []lifeStep {
	h, t := v.Head, v.Timeouts
	var why, cause string
	switch {
	case h.Phase == phaseStarting && v.Now.Sub(h.StartedAt) > t.Load:
		why, cause = "not ready in time", fmt.Sprintf("not ready after %s", t.Load)
	case h.Phase == phaseReady && v.Now.Sub(h.LastOK) > t.UnhealthyAfter:
		why, cause = "unhealthy", fmt.Sprintf("/health failing for more than %s", t.UnhealthyAfter)
	default:
		return nil
	}
	return append([]lifeStep{{Kind: stepStop, Proc: h.Name, Reason: why}}, onFailure(v, h.Name, cause, d)...)
}

// onLoad: a reading of the serving head's load (requests in flight, work
// done; or the error reading it). With requests in flight its work
// counters must move within timeouts.stall: a head whose worker's link
// went silent blocks forever in llama.cpp's RPC (no timeout, no keepalive:
// slurm-facts 26) while /health stays 200, and only the lack of progress
// shows it. A reading that fails is no progress, but counts only once the
// head was seen busy; an idle head, or one with no counters (a router), is
// never stalled. An extra replica (idle exit) whose head has counted
// nothing in flight for that long ends in order (ReasonIdle); a count
// that fails is not idle.
func onLoad(v lifeView, l loadMsg, d lifeDeps) []lifeStep {
	h, m, now := v.Head, l.metrics, v.Now
	var steps []lifeStep
	switch {
	case v.Timeouts.Stall <= 0:
		// off (plans built by hand; configs always set it)
	case l.err == nil && (m.InFlight == 0 || !m.HasWork):
		steps = append(steps, lifeStep{Kind: stepProgress, Work: m.Work})
	case l.err == nil && (m.Work != h.Work || h.BusySince.IsZero()):
		steps = append(steps, lifeStep{Kind: stepProgress, Work: m.Work, At: now})
	case h.BusySince.IsZero(), now.Sub(h.BusySince) < v.Timeouts.Stall:
	default:
		stuck := now.Sub(h.BusySince).Round(time.Second)
		cause := fmt.Sprintf("hung: requests in flight and no progress for %s (a worker's link silent?)", stuck)
		return append([]lifeStep{{Kind: stepHung, Reason: cause, N: m.InFlight, Delay: stuck, Err: l.err}}, hungHead(v, cause, d)...)
	}
	switch {
	case v.IdleExit <= 0:
	case v.State != StateReady || l.err != nil || m.InFlight > 0:
		steps = append(steps, lifeStep{Kind: stepIdleSince})
	case v.IdleSince.IsZero():
		steps = append(steps, lifeStep{Kind: stepIdleSince, At: now})
	case now.Sub(v.IdleSince) >= v.IdleExit:
		steps = append(steps, lifeStep{Kind: stepIdleExit, Delay: now.Sub(v.IdleSince).Round(time.Second)})
		steps = append(steps, onStop(v, StopRequest{Reason: ReasonIdle, Since: now})...)
	}
	return steps
}

// onSilentLink: the kernel shows the head's connection to workers (their
// host:port) silent (data retransmitted, nothing acknowledged: their link
// or node is down): the head would wait on them for ever (slurm-facts 26),
// and a request sent now would hang until timeouts.stall. Seen in
// seconds, where the stall check needs timeouts.stall; a slow prompt batch
// is never taken for it (its data is acknowledged).
func onSilentLink(v lifeView, workers []string, d lifeDeps) []lifeStep {
	if len(workers) == 0 || v.State == StateDraining || (v.Head.Phase != phaseStarting && v.Head.Phase != phaseReady) {
		return nil
	}
	cause := "the link to worker " + strings.Join(workers, ", ") + " is silent (sent data retransmitted, nothing acknowledged)"
	return append([]lifeStep{{Kind: stepLinkSilent, Nodes: workers}}, hungHead(v, cause, d)...)
}

// hungHead kills a head that waits on a worker for ever and restarts it
// with every worker. A worker cut off from the head never sees it go
// (rpc-server has no keepalive): it keeps the dead connection for ever,
// and a new head, or a port check, would queue behind it (measured, notes
// Q1). Every worker restarts; one that is still cut off fails its port
// check.
func hungHead(v lifeView, cause string, d lifeDeps) []lifeStep {
	steps := []lifeStep{{Kind: stepKill, Proc: v.Head.Name, Reason: cause}}
	for _, w := range v.Workers {
		steps = append(steps, lifeStep{Kind: stepStop, Proc: w.Name,
			Reason: "restarted after a hung head: a worker cut off from it holds its dead connection"})
	}
	return append(steps, onFailure(v, v.Head.Name, cause, d)...)
}

// onDrainPoll: a poll while draining. The budget's in-flight share spent,
// everything stops; else the head is asked how many requests it has in
// flight, unless a count is under way.
func onDrainPoll(v lifeView) []lifeStep {
	switch {
	case v.State != StateDraining:
		return nil
	case v.Drain.saving && !v.Now.Before(v.Drain.saveBy):
		return append([]lifeStep{{Kind: stepSaveLate}}, finish()...)
	case v.Drain.saving:
		return nil
	case !v.Now.Before(v.Drain.deadline):
		return append([]lifeStep{{Kind: stepSpent}}, endWait(v)...)
	case v.Drain.checking:
		return nil
	}
	return []lifeStep{{Kind: stepCount}}
}

// onInFlight: a count of the head's requests in flight while draining. An
// idle head ends the wait (an idle stop's only once the controller had
// time to unroute it); a head that cannot say (a 503 under load, a
// timeout) may be busy: the drain waits on and asks again, until its
// deadline.
func onInFlight(v lifeView, n int, err error) []lifeStep {
	if v.State != StateDraining {
		return nil
	}
	steps := []lifeStep{{Kind: stepCounted, N: n, Err: err}}
	switch {
	case v.Drain.saving:
		return steps
	case err != nil && !v.Drain.unsure:
		return append(steps, lifeStep{Kind: stepUnsure, Err: err})
	case err != nil, n == 0 && v.Now.Before(v.Drain.notBefore):
		return steps
	case n == 0:
		return append(append(steps, lifeStep{Kind: stepIdle}), endWait(v)...)
	case v.Drain.unsure:
		return append(steps, lifeStep{Kind: stepSure, N: n})
	}
	return steps
}

// endWait: the drain's wait for requests in flight ended. A tier that
// saves its head's slots saves them first, by the end of the split's save
// share (the stop after it is paid for as without saves: the requeue is
// never later); else everything stops.
func endWait(v lifeView) []lifeStep {
	if !v.SaveSlots || v.Head.Phase != phaseReady {
		return finish()
	}
	return []lifeStep{{Kind: stepSave, At: v.Drain.saveBy}}
}

// onSaved: the saves of the head's slots ended (n saved, err the first
// failure): everything stops.
func onSaved(v lifeView, n int, err error) []lifeStep {
	if v.State != StateDraining || !v.Drain.saving {
		return nil
	}
	return append([]lifeStep{{Kind: stepSaved, N: n, Err: err}}, finish()...)
}

// silentAfter is how long the startup probes of a worker may get no answer
// at all before its node counts as cut off. A node that is up answers a
// probe at once, with a refusal if the worker does not listen yet.
const silentAfter = 3 * time.Second

// probeResult is what a worker's startup probe found.
type probeResult int

const (
	probeAnswered probeResult = iota // the port accepts connections
	probeRefused                     // its node answers (a refusal): it is starting
	probeSilent                      // no answer at all (health.Silent)
)

// onProbe: a startup probe of a starting worker's port. Accepted, the
// worker is ready; refused, its node is up and it is starting; no answer
// at all for silentAfter says its link or its node is down, and
// restarting the worker cannot help: it is dropped at once when
// min_workers leaves room (rather than after worker_start_failures starts
// of worker_start each); without room it keeps the usual path, said once
// (the link may come back within worker_start, scripts/FACTS-cluster.md
// L6).
func onProbe(v lifeView, name string, res probeResult, err error, d lifeDeps) []lifeStep {
	p, isHead, ok := v.proc(name)
	switch {
	case !ok || isHead:
		return nil
	case res == probeAnswered:
		return onReady(v, name, "port accepts connections")
	case res == probeRefused:
		return []lifeStep{{Kind: stepSilentAt, Proc: name}}
	case p.SilentSince.IsZero():
		return []lifeStep{{Kind: stepSilentAt, Proc: name, At: v.Now}}
	case v.Now.Sub(p.SilentSince) < silentAfter:
		return nil
	case len(v.Workers)-1 >= max(v.MinWorkers, 1) && d.Replan != nil:
		return onDrop(v, name, fmt.Sprintf("unreachable from the batch node for %s (no answer at all: its link or node is down, a restart cannot help)", silentAfter), d)
	case !p.SilentLogged:
		return []lifeStep{{Kind: stepNoRoom, Proc: name, Err: err}}
	}
	return nil
}

// onUnreachable: the running head reports that it could not connect to a
// worker at addr (host:port): real llama-server then loads and serves
// without it, on fewer devices than planned (a 72B model may not even
// fit). The head is killed and the worker counts a failed start, its node
// at fault (it is restarted, and dropped after worker_start_failures if it
// stays unreachable: its node or link is down).
func onUnreachable(v lifeView, addr string, d lifeDeps) []lifeStep {
	if v.Head.Phase == phaseDown || v.State == StateDraining {
		return nil
	}
	for _, w := range v.Workers {
		if w.Addr != addr {
			continue
		}
		steps := []lifeStep{{Kind: stepUnreached, Proc: w.Name, Reason: addr},
			{Kind: stepKill, Proc: v.Head.Name, Reason: "could not connect to worker " + w.Name},
			{Kind: stepStop, Proc: w.Name, Reason: "unreachable from the head"},
			{Kind: stepNodeFault, Proc: w.Name, Reason: "the head could not connect to its worker at " + addr}}
		return append(steps, onStartFail(v, w.Name, "unreachable from the head ("+addr+")", d)...)
	}
	return []lifeStep{{Kind: stepUnreached, Reason: addr}}
}
