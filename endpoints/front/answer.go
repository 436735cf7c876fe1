package front

import (
	"time"

	"slurm-llm/endpoints/front/wire"
)

// What an answer says of itself, read on its way to the client (the
// call's wire.Tally: by wire.Sniff for a whole answer, by the splicer for
// a stream): its tokens (for llm_front_tokens_total, the usage record and
// the per-user token limits) and why it ended (llm_front_answers_total).

// Finish reasons of llm_front_answers_total besides the heads' own and
// wire's.
const (
	finishCut   = "cut"   // it ended before a finish, and was not continued
	finishOther = "other" // a reason this build does not know: labels stay bounded
)

// finishLabel bounds a head's finish reason to the ones OpenAI's API
// defines (a label's values must not come from the answer unchecked).
func finishLabel(r string) string {
	switch r {
	case wire.FinishStop, wire.FinishLength, "tool_calls", "content_filter", "function_call", wire.FinishError, finishCut:
		return r
	}
	return finishOther
}

// countAnswer adds a finished call's tokens and finish to the metrics.
func (s *Server) countAnswer(c *call) {
	if c.tier == "" || !c.sent {
		return
	}
	if c.tally.Counted {
		s.metrics.tokens.WithLabelValues(c.tier, c.model, "prompt").Add(float64(c.tally.Prompt))
		s.metrics.tokens.WithLabelValues(c.tier, c.model, "completion").Add(float64(c.tally.Completion))
	}
	switch {
	case c.tally.Finish != "":
		s.metrics.answers.WithLabelValues(c.tier, c.model, finishLabel(c.tally.Finish)).Inc()
	case c.outcome == OutcomeCut:
		s.metrics.answers.WithLabelValues(c.tier, c.model, finishCut).Inc()
	}
}

// served is how long the call's answer took on its heads.
func (c *call) served(now time.Time) time.Duration {
	if c.dispatched.IsZero() {
		return 0
	}
	return now.Sub(c.start) - c.held
}
