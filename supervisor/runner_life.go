package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// view is what the rules of life.go see of the tier now.
func (r *Runner) view() lifeView {
	procs := func(ms []*member) []procView {
		out := make([]procView, 0, len(ms))
		for _, m := range ms {
			out = append(out, m.view())
		}
		return out
	}
	unroute := r.opts.IdleUnroute
	if unroute <= 0 {
		unroute = DefaultIdleUnroute
	}
	return lifeView{
		Now: r.clock.Now(), State: r.state, Head: r.head.view(),
		Workers: procs(r.workers), Retired: procs(r.retired),
		MinWorkers: r.plan.MinWorkers, StartFailLimit: r.plan.Restart.WorkerStartFailures,
		Split: r.plan.Split(stopMargin(r.opts.Launcher)), IdleUnroute: unroute,
		Timeouts: r.plan.Timeouts, Drain: r.drain, IdleExit: r.opts.IdleExit, IdleSince: r.idleSince,
		SaveSlots: r.plan.SlotSave.Dir != "",
	}
}

func (m *member) view() procView {
	return procView{Name: m.spec.Name, Node: m.spec.Node, Addr: net.JoinHostPort(m.spec.Addr, strconv.Itoa(m.spec.Port)),
		Phase: m.phase, StartFails: m.startFails, SilentLogged: m.silentLogged,
		StartedAt: m.startedAt, LastOK: m.lastOK, SilentSince: m.silentSince, BusySince: m.busySince, Work: m.work}
}

// deps are the restart policy and the replanner, for the rules.
func (r *Runner) deps() lifeDeps {
	return lifeDeps{Policy: r.policy.Decide, Replan: r.opts.Replan}
}

// apply carries out the steps a rule gave, in order. It decides nothing:
// each step names what to do and to which process.
func (r *Runner) apply(steps []lifeStep) {
	for _, s := range steps {
		m := r.find(s.Proc)
		switch s.Kind {
		case stepExited:
			r.recordExit(m, s)
		case stepState:
			r.setState(s.To, s.Reason)
		case stepGiveUp:
			r.giveUp(m, s.Reason)
		case stepRecheck:
			r.recheckWorkers(m)
		case stepKill:
			r.killProcess(m, s.Reason)
		case stepStop:
			r.stopProcess(m, s.Reason)
		case stepRestartAt:
			r.restartAt = r.clock.Now().Add(s.Delay)
			if s.Delay > 0 {
				r.log.Info("restart scheduled", "process", s.Proc, "delay", s.Delay)
			}
		case stepStartFail:
			m.startFails++
		case stepDropped:
			r.log.Warn("worker dropped", "process", s.Proc, "node", m.spec.Node, "workers_left", strings.Join(s.Nodes, ","))
			r.emit(Event{Kind: EventDropped, Process: s.Proc, Reason: s.Reason})
		case stepApplyPlan:
			r.applyPlan(s.Plan)
		case stepReady:
			m.phase, m.startFails = phaseReady, 0
			r.log.Info("worker ready", "process", s.Proc, "node", m.spec.Node, "how", s.Reason,
				"after", r.clock.Now().Sub(m.startedAt).Round(time.Millisecond))
			r.emit(Event{Kind: EventReady, Process: s.Proc, Reason: s.Reason})
		case stepReconcile:
			r.reconcile()
		case stepDrain:
			r.drain = s.Drain
		case stepWaitDrain:
			split := r.plan.Split(stopMargin(r.opts.Launcher))
			r.log.Info("draining: waiting for requests in flight", "until", r.drain.deadline.Format(time.RFC3339Nano),
				"split", fmt.Sprintf("in flight %s, stop %s", split.InFlight, split.Stop()))
			r.checkDrain()
		case stepUpdateStop:
			r.updateStop(s.Req)
		case stepStopAgain:
			r.log.Warn("stop requested again: not waiting for requests in flight")
		case stepFinish:
			r.finish()
		case stepStopped:
			r.setState(StateStopped, string(r.drain.req.Reason))
		case stepHeadReady:
			r.headReady(s.At)
		case stepNodeFault:
			m.nodeFault = s.Reason
		default:
			r.applyCheck(s)
		}
	}
}

// applyCheck carries out the steps of the checks of a running tier: the
// head's progress and idleness, a hung head, the drain's counts.
func (r *Runner) applyCheck(s lifeStep) {
	switch s.Kind {
	case stepProgress:
		r.head.work, r.head.busySince = s.Work, s.At
	case stepIdleSince:
		r.idleSince = s.At
	case stepIdleExit:
		r.log.Info("idle: nothing in flight, ending this extra replica", "idle_for", s.Delay, "idle_exit", r.opts.IdleExit)
	case stepHung:
		r.log.Error("head hung", "in_flight", s.N, "no_progress_for", s.Delay, "read_error", s.Err)
	case stepLinkSilent:
		r.log.Error("a worker's link is silent: restarting the head and its workers", "workers", strings.Join(s.Nodes, ","))
	case stepCount:
		r.drain.checking = true
		r.countInFlight()
	case stepCounted:
		r.drain.checking = false
		r.log.Debug("requests in flight counted", "in_flight", s.N, "error", s.Err)
	case stepUnsure:
		r.drain.unsure = true
		r.log.Warn("cannot count requests in flight: waiting as if busy", "until", r.drain.deadline.Format(time.RFC3339Nano), "error", s.Err)
	case stepSure:
		r.drain.unsure = false
		r.log.Info("requests in flight counted again", "in_flight", s.N)
	case stepIdle:
		r.log.Info("no request in flight")
	case stepSpent:
		r.log.Warn("drain budget spent: stopping with requests in flight", "in_flight", r.inFlight)
	case stepSave:
		r.saveSlots(s.At)
	case stepSaved:
		switch {
		case errors.Is(s.Err, context.DeadlineExceeded):
			r.log.Warn("gave up saving slots at the deadline: stopping the head, the requeue is not delayed",
				"saved", s.N, "deadline", r.drain.saveBy.Format(time.RFC3339Nano), "error", s.Err)
		case s.Err != nil:
			r.log.Warn("slots saved, some not", "saved", s.N, "error", s.Err)
		default:
			r.log.Info("slots saved", "saved", s.N)
		}
	case stepSaveLate:
		r.log.Warn("slot saves not done by their deadline: stopping the head, the requeue is not delayed",
			"deadline", r.drain.saveBy.Format(time.RFC3339Nano))
	default:
		r.applyWorkerCheck(s)
	}
}

// applyWorkerCheck carries out the steps of a worker's startup probes and
// of the head's word about its workers.
func (r *Runner) applyWorkerCheck(s lifeStep) {
	m := r.find(s.Proc)
	switch s.Kind {
	case stepSilentAt:
		m.silentSince = s.At
	case stepNoRoom:
		m.silentLogged = true
		r.log.Warn("a worker's node does not answer (its link or node is down?); min_workers leaves no room to drop it",
			"process", s.Proc, "node", m.spec.Node, "error", s.Err, "worker_start", r.plan.Timeouts.WorkerStart)
	case stepUnreached:
		if m == nil {
			r.log.Warn("the head could not connect to an address that is no worker of the plan", "addr", s.Reason)
			return
		}
		r.log.Warn("the head could not connect to a worker: it would serve without it", "process", s.Proc, "addr", s.Reason)
	default:
		r.log.Error("bug: a step no one carries out", "step", s.Kind)
	}
}

// recordExit takes a process's end: it is down, its exit is an Event, and
// a failure is logged with what shows on its node (a step Slurm refused
// there marks the node unusable).
func (r *Runner) recordExit(m *member, s lifeStep) {
	expected := m.phase == phaseStopping
	m.phase, m.h, m.checking = phaseDown, nil, false
	kind := "unexpected"
	if expected {
		kind = "expected"
	}
	r.emit(Event{Kind: EventExited, Process: s.Proc, PID: s.PID, Result: s.Result, Reason: kind})
	if !s.Failure {
		r.log.Info("process exited", "process", s.Proc, "pid", s.PID, "cause", s.Result.String(), "expected", expected)
		return
	}
	r.log.Warn("process exited", "process", s.Proc, "node", m.spec.Node, "pid", s.PID, "cause", s.Result.String(),
		"exit_code", s.Result.Code, "signal", int(s.Result.Signal), "oom", s.Result.OOM)
	m.nodeFault = stepRefusal(s.Result)
}
