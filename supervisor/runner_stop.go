package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"slurm-llm/health"
)

// drainState is the ordered stop under way.
type drainState struct {
	req      StopRequest
	deadline time.Time // when waiting for in-flight requests ends
	checking bool
}

// inFlightMsg is the head's count of requests in flight while draining.
type inFlightMsg struct {
	n   int
	err error
}

// handleStop starts the ordered stop: endpoint draining at once, then wait
// for in-flight requests (unless skipped) within the drain budget minus the
// time the stop itself may take, then stop everything. A request during
// the drain may name a better reason (once Slurm said why) or skip the wait.
func (r *Runner) handleStop(req StopRequest) {
	if r.state == StateDraining {
		r.updateStopReason(req.Reason)
		if req.SkipDrain {
			r.log.Warn("stop requested again: not waiting for requests in flight")
			r.finish()
		}
		return
	}
	now := r.opts.Now()
	stopTime := 2 * (r.plan.Timeouts.StopGrace + stopMargin(r.opts.Launcher)) // head, then the workers together
	r.drain = drainState{req: req, deadline: now.Add(r.plan.Drain.Budget - stopTime)}
	r.setState(StateDraining, string(req.Reason))
	if req.SkipDrain || r.head.phase != phaseReady {
		r.finish()
		return
	}
	r.checkDrain()
}

// stopMargin is the time a launcher's Stop may take beyond the grace, if it says.
func stopMargin(l Launcher) time.Duration {
	if m, ok := l.(interface{ StopMargin() time.Duration }); ok {
		return m.StopMargin()
	}
	return 0
}

// updateStopReason republishes the draining endpoint with a new reason.
func (r *Runner) updateStopReason(reason StopReason) {
	if reason == "" || reason == r.drain.req.Reason {
		return
	}
	r.drain.req.Reason, r.reason = reason, string(reason)
	r.log.Info("stop reason", "reason", reason)
	r.emit(Event{Kind: EventState, State: StateDraining, Reason: string(reason)})
	r.writeEndpoint()
}

// checkDrain ends the drain when its deadline passed, else asks the head
// how many requests are in flight.
func (r *Runner) checkDrain() {
	if !r.opts.Now().Before(r.drain.deadline) {
		r.log.Warn("drain budget spent: stopping with requests in flight")
		r.finish()
		return
	}
	if r.drain.checking {
		return
	}
	r.drain.checking = true
	base := health.BaseURL(r.head.spec.Addr, r.head.spec.Port)
	client, timeout := r.opts.HTTPClient, r.plan.Timeouts.HealthTimeout
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		n, err := health.InFlight(ctx, client, base)
		r.send(inFlightMsg{n: n, err: err})
	}()
}

// handleInFlight ends the drain when the head is idle. A head that cannot
// say (no /metrics nor /slots) is not waited for.
func (r *Runner) handleInFlight(m inFlightMsg) {
	if r.state != StateDraining {
		return
	}
	r.drain.checking = false
	switch {
	case m.err != nil:
		r.log.Warn("cannot count requests in flight: stopping now", "error", m.err)
		r.finish()
	case m.n == 0:
		r.log.Info("no request in flight")
		r.finish()
	default:
		r.log.Debug("waiting for requests in flight", "in_flight", m.n)
	}
}

// finish stops the head, then the workers, removes the endpoint file and
// ends the run. It blocks the Run goroutine: nothing is left to decide.
func (r *Runner) finish() {
	r.stopAll()
	r.takeLateReasons()
	r.removeEndpoint()
	r.setState(StateStopped, string(r.drain.req.Reason))
}

// takeLateReasons keeps the last reason of the stop requests that arrived
// while the processes were being stopped (Slurm's answer often comes then),
// so that the final state names it.
func (r *Runner) takeLateReasons() {
	for {
		select {
		case req := <-r.stopCh:
			if req.Reason != "" && req.Reason != r.drain.req.Reason {
				r.drain.req.Reason = req.Reason
				r.log.Info("stop reason", "reason", req.Reason)
			}
		default:
			return
		}
	}
}

// giveUp ends the run with ErrGaveUp: the endpoint goes first (no more
// routing), then every process.
func (r *Runner) giveUp(reason string) {
	r.err = fmt.Errorf("%w: %s", ErrGaveUp, reason)
	r.removeEndpoint()
	r.stopAll()
	r.setState(StateFailed, reason)
}

// stopAll stops the head (TERM, StopGrace, KILL), then every worker at
// once, and waits until all are gone.
func (r *Runner) stopAll() {
	grace := r.plan.Timeouts.StopGrace
	if h := r.head.h; h != nil {
		r.log.Info("stopping process", "process", r.head.spec.Name)
		h.Stop(grace)
	}
	var wg sync.WaitGroup
	for _, w := range append(append([]*member(nil), r.workers...), r.retired...) {
		if w.h == nil {
			continue
		}
		r.log.Info("stopping process", "process", w.spec.Name)
		wg.Add(1)
		go func(h Handle) {
			defer wg.Done()
			h.Stop(grace)
		}(w.h)
	}
	wg.Wait()
	r.log.Info("all processes stopped")
}
