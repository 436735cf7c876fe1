package front

import (
	"net/http"
	"strings"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/share"
	"slurm-llm/endpoints/access/usage"
)

// Who is at the door (issue 28): the front door asks package access who
// sent a request, whether they may start one more on its tier, who goes
// next when the tier's heads are full, and records what each request
// used. Without Options.Access, nobody is known and nothing is limited or
// recorded; requests wait in arrival order.

// OutcomeLimited: a per-user limit refused the request (429).
const OutcomeLimited = "limited"

// keysPath reports whether the request is for the key endpoint (at the
// root, or under a tier's prefix, where a client configured with that
// base URL looks for it).
func (s *Server) keysPath(path string) bool {
	return s.opts.Access != nil && s.opts.Access.Keys != nil &&
		(path == access.KeysPath || strings.HasPrefix(path, access.KeysPath+"/"))
}

// identify names the request's user (c.id); false when it was answered
// 401 (a key that is not valid, or none where one is required).
func (s *Server) identify(w http.ResponseWriter, r *http.Request, c *call) bool {
	if s.opts.Access == nil {
		return true
	}
	id, err := s.opts.Access.Identifier.Identify(r)
	if err != nil {
		access.WriteUnauthorized(w, err.Error())
		c.status, c.outcome, c.why = http.StatusUnauthorized, OutcomeRejected, err.Error()
		return false
	}
	c.id = id
	return true
}

// admit applies the user's limits on c's tier; false when it was answered
// 429. An admitted call is counted until finish.
func (s *Server) admit(w http.ResponseWriter, c *call) bool {
	if s.opts.Access == nil {
		return true
	}
	d := s.opts.Access.Limiter.Admit(c.tier, c.id.User)
	if !d.OK {
		access.WriteRateLimited(w, d)
		c.status, c.outcome, c.why = http.StatusTooManyRequests, OutcomeLimited, "rate limit: "+d.Why
		return false
	}
	c.admitted = true
	return true
}

// begin counts c on a head of its tier for fair share, once.
func (s *Server) begin(c *call) {
	if s.opts.Access == nil || c.tracked {
		return
	}
	c.tracked = true
	s.opts.Access.Tracker.Begin(c.tier, c.id.User)
}

// account ends what begin and admit counted and records c's use: in the
// usage database (off the request path), and in the user's token rate.
// Only requests for the models (a POST to a path passed on to heads) are
// use: /health, /v1/models, the key endpoint, OPTIONS and an unknown path
// are not recorded (a client that polls
// /v1/models, as chat front ends do, would fill the database with rows of
// nothing).
func (s *Server) account(c *call) {
	a := s.opts.Access
	if a == nil {
		return
	}
	now := s.now()
	served := c.served(now)
	if c.tracked {
		a.Tracker.End(c.tier, c.id.User, served)
	}
	tokens := int64(c.tally.Prompt + c.tally.Completion)
	if c.admitted {
		a.Limiter.Done(c.tier, c.id.User, tokens)
	}
	if c.method != http.MethodPost || !proxied[c.path] {
		return
	}
	rec := usage.Record{Time: c.start, User: c.id.User, Account: c.id.Account, Tier: c.tier, Model: c.model,
		Status: c.status, Outcome: c.outcome, PromptTokens: int64(c.tally.Prompt), CompletionTokens: int64(c.tally.Completion),
		Held: c.held, Served: served}
	if a.Usage != nil {
		a.Usage.Add(rec)
	} else {
		a.Metrics.Observe(rec)
	}
}

// fairShare reports whether held requests go by fair share, not arrival.
func (s *Server) fairShare() bool { return s.opts.Access != nil && s.opts.Access.FairShare }

// order is the order in which q's waiters are looked at: fair share across
// users (share.Order over what each user has on the tier's heads), or
// arrival.
func (s *Server) order(q *queue) []int {
	if !s.fairShare() || len(q.waiters) < 2 {
		out := make([]int, len(q.waiters))
		for i := range out {
			out[i] = i
		}
		return out
	}
	ws := make([]share.Waiter, len(q.waiters))
	for i, w := range q.waiters {
		ws[i] = share.Waiter{User: w.user, Weight: w.weight, Arrival: w.arrival}
	}
	return share.Order(ws, s.opts.Access.Tracker.Loads(q.tier))
}

// weight is c's user's fair-share weight.
func (s *Server) weight(c *call) float64 {
	if s.opts.Access == nil {
		return 1
	}
	return s.opts.Access.Weight(c.id)
}
