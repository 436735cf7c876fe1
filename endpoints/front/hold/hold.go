// Package hold is the hold rule, pure: whether a request whose tier has no
// head for its model now waits for one, or is answered at once and why,
// from the tier's view and the request's deadline (Decide: an Input in, a
// Verdict out, table-tested without a network). The queue held requests
// wait in, who goes next and when the rule is asked again are the front
// door's.
package hold

import (
	"strings"
	"time"

	"slurm-llm/endpoints/tiers"
)

// Verdict says whether a request whose tier has no head for its model
// waits for one, and if not, why. The zero value answers at once.
type Verdict struct {
	// Hold: wait for a head until the request's deadline.
	Hold bool
	// Why says, for the log, what the rule saw.
	Why string
}

// Input is everything the hold rule reads.
type Input struct {
	// View is the tier's view from the last pass (reason, expected back).
	View tiers.TierView
	// ReasonFor is how long the tier's view has given its present reason
	// while the tier served nothing: no head, none draining (0 while it
	// has one: its heads failed before answering, or a drain's requests
	// in flight still run). A view with no estimate is held for the first
	// HoldUnknown of its reason counted from when the tier stopped
	// serving, not from its drain's start: a stream cut by the drain's
	// deadline, the seconds after a preemption's drain before Slurm lists
	// the requeued job, the gap between a re-plan's drain and its new
	// head's file.
	ReasonFor time.Duration
	// Now and Deadline: the request gives up waiting at Deadline.
	Now, Deadline time.Time
	// HoldUnknown is how long into an outage a request is held while the
	// view has no estimate yet ([front] hold_unknown).
	HoldUnknown time.Duration
}

// Decide is the hold rule, pure. A request is held exactly when holding
// can succeed: the view's estimate falls before the deadline; or the tier
// is in a step that takes seconds and has no estimate (loading, a re-plan,
// overdue); or the outage is young enough that Slurm may not have an
// estimate yet (also when nothing is known: the scheduler does not answer,
// or is not asked, and no file says why; a re-plan's head is between
// files). It is answered at once when the view says the tier will not be
// back by itself (disabled, held, not queued, its file refused, its job
// ended) or not in time.
func Decide(in Input) Verdict {
	v := in.View
	switch {
	case !in.Deadline.After(in.Now):
		return Verdict{Why: "no hold: the request's hold is over"}
	case v.State == tiers.StateRouted:
		// Routed, but its heads failed before answering (refused, reset,
		// loading): they are skipped for fail_timeout, or the next pass
		// takes them out.
		return Verdict{Hold: true, Why: "routed: waiting for a head that answers"}
	case final(v.Reason):
		return Verdict{Why: "no hold: " + v.Reason}
	case v.ExpectedBack != nil:
		if v.ExpectedBack.After(in.Deadline) {
			return Verdict{Why: "no hold: expected back after the request's hold ends"}
		}
		return Verdict{Hold: true, Why: "expected back within the hold"}
	case v.Reason == tiers.ReasonStarting || v.Reason == tiers.ReasonReplanning || v.Overdue:
		return Verdict{Hold: true, Why: "back in seconds: " + v.Reason}
	case in.ReasonFor < in.HoldUnknown:
		return Verdict{Hold: true, Why: "no estimate yet, early in the outage: " + v.Reason}
	}
	return Verdict{Why: "no hold: no estimate (" + v.Reason + ")"}
}

// final reports whether a reason means the tier does not come back by
// itself soon: a person must act, or its job ended.
func final(reason string) bool {
	switch reason {
	case tiers.ReasonDisabled, tiers.ReasonHeld, tiers.ReasonNotQueued, tiers.ReasonRefused:
		return true
	}
	return strings.HasPrefix(reason, "disabled") || strings.HasPrefix(reason, "held") ||
		strings.HasPrefix(reason, "job ") || strings.HasPrefix(reason, "not routed")
}
