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
	req StopRequest
	// since is when the budget started counting: the earliest Since of the
	// requests (the notice, or Slurm's PreemptTime).
	since time.Time
	// deadline is when waiting for in-flight requests ends: since plus the
	// split's in-flight wait.
	deadline time.Time
	checking bool
	// unsure: the last in-flight check failed (logged once until one succeeds).
	unsure bool
	// notBefore: an idle stop does not end before this, even with nothing
	// in flight (the controller is still unrouting the endpoint).
	notBefore time.Time
	// saveBy is when the saves of the head's slots must end (deadline
	// plus the split's save share); saving that they are under way.
	saveBy time.Time
	saving bool
}

// inFlightMsg is the head's count of requests in flight (draining, or the
// periodic count while ready).
type inFlightMsg struct {
	gen int
	n   int
	err error
}

// handleStop takes a request for an ordered stop (life.go, onStop).
func (r *Runner) handleStop(req StopRequest) {
	r.apply(onStop(r.view(), req))
}

// stopMargin is the time a launcher's Stop may take beyond the grace, if it says.
func stopMargin(l Launcher) time.Duration {
	if m, ok := l.(interface{ StopMargin() time.Duration }); ok {
		return m.StopMargin()
	}
	return 0
}

// updateStop takes a later request's reason (republished) and an earlier
// start of the budget.
func (r *Runner) updateStop(req StopRequest) {
	if !req.Since.IsZero() && req.Since.Before(r.drain.since) {
		r.drain.deadline = r.drain.deadline.Add(req.Since.Sub(r.drain.since))
		r.drain.saveBy = r.drain.saveBy.Add(req.Since.Sub(r.drain.since))
		r.drain.since = req.Since
		r.log.Info("drain budget counts from earlier", "since", req.Since.Format(time.RFC3339Nano),
			"until", r.drain.deadline.Format(time.RFC3339Nano))
	}
	if req.Reason == "" || req.Reason == r.drain.req.Reason {
		return
	}
	r.drain.req.Reason, r.reason = req.Reason, string(req.Reason)
	r.log.Info("stop reason", "reason", req.Reason)
	r.emit(Event{Kind: EventState, State: StateDraining, Reason: string(req.Reason)})
	r.writeEndpoint()
}

// checkDrain ends the drain when its deadline passed, else asks the head
// how many requests are in flight (life.go, onDrainPoll).
func (r *Runner) checkDrain() { r.apply(onDrainPoll(r.view())) }

// countInFlight asks the head, on a goroutine, how many requests it has in
// flight; the answer comes back as an inFlightMsg.
func (r *Runner) countInFlight() {
	base := health.BaseURL(r.head.spec.Addr, r.head.spec.Port)
	client, timeout, gen := r.opts.HTTPClient, r.plan.Timeouts.HealthTimeout, r.head.gen
	r.ask(func() any {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		n, err := health.InFlight(ctx, client, base)
		return inFlightMsg{gen: gen, n: n, err: err}
	})
}

// handleInFlight takes a count of requests in flight: published while the
// tier serves; while draining, life.go's onInFlight says what follows.
func (r *Runner) handleInFlight(m inFlightMsg) {
	if m.gen != r.head.gen {
		return
	}
	r.recordInFlight(m)
	r.apply(onInFlight(r.view(), m.n, m.err))
}

// recordInFlight keeps the head's count for the endpoint file (nil when
// unknown) and republishes it when it changed.
func (r *Runner) recordInFlight(m inFlightMsg) {
	var now *int
	if m.err == nil {
		n := m.n
		now = &n
	}
	if (now == nil) == (r.inFlight == nil) && (now == nil || *now == *r.inFlight) {
		return
	}
	r.inFlight = now
	r.writeEndpoint()
}

// finish stops the head, then the workers, removes the endpoint file and
// ends the run (the state stopped follows, a step of the rules). It blocks
// the Run goroutine: nothing is left to decide.
func (r *Runner) finish() {
	r.stopAll()
	r.takeLateReasons()
	r.removeEndpoint()
	r.removeHead()
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
// routing), then every process (the state failed follows, a step of the
// rules). m is the process whose failure made the
// runner give up: when its node could not be used, the error is a
// NodeError naming it, so that the job can ask for other nodes.
func (r *Runner) giveUp(m *member, reason string) {
	r.err = fmt.Errorf("%w: %s", ErrGaveUp, reason)
	if m.nodeFault != "" {
		r.err = &NodeError{Node: m.spec.Node, Why: m.nodeFault, Reason: reason}
	}
	r.removeEndpoint()
	r.removeHead()
	r.stopAll()
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
