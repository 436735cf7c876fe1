package front

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"slurm-llm/endpoints/front/hold"
	"slurm-llm/endpoints/tiers"
)

// queue is one tier's held requests, in arrival order. The dispatcher
// (dispatch) hands heads to them in that order whenever the table may
// have changed; a waiter whose head it cannot find stays, unless the hold
// rule now says it will not be served in time.
type queue struct {
	tier    string
	mu      sync.Mutex
	waiters []*waiter
	// waiting is len(waiters), read without the lock by release.
	waiting atomic.Int64
	bytes   int64
	// written is closed once the request last granted a head was written
	// to it (or gave up): the next granted one waits for it, so that held
	// requests reach their heads in arrival order, not in the order their
	// goroutines happen to run.
	written chan struct{}
}

// waiter is one held request.
type waiter struct {
	model    string
	conv     string // wire.ConversationKey of its conversation
	deadline time.Time
	size     int64
	ch       chan grant // buffered: the dispatcher never blocks
	// user, weight and arrival order it among the others (fair share).
	user    string
	weight  float64
	arrival time.Time
	// longest is how long it may wait while every head of its model is
	// busy (hold_max from its arrival, or its own X-LLM-Hold): a busy
	// tier is not an outage, and its hold is not the bound.
	longest time.Time
}

// until is w's deadline now: its hold, or longest while its model's heads
// are all busy.
func (s *Server) until(t *table, tier string, w *waiter) time.Time {
	if w.longest.After(w.deadline) && s.full(t, tier, w.model) {
		return w.longest
	}
	return w.deadline
}

// grant is the dispatcher's answer to a waiter: a head (acquired: its
// in-flight count already holds the request), or why none.
type grant struct {
	head    *head
	refusal *refusal
	// after is closed when the request granted before this one was
	// written; written is this one's, to close once it is.
	after, written chan struct{}
}

// pass lets the request granted after this one go, once the one before it
// went, when this one will not be written (its client left, or it got a
// refusal): arrival order holds for the others.
func (g grant) pass() {
	if g.written == nil {
		return
	}
	if g.after == nil {
		close(g.written)
		return
	}
	go func() {
		<-g.after
		close(g.written)
	}()
}

// refusal is why a request gets the front door's own 503.
type refusal struct {
	view tiers.TierView
	// why is for the log; busy is set when the tier's queue was full.
	why  string
	busy bool
}

// queueOf returns tier's queue, made on first use.
func (s *Server) queueOf(tier string) *queue {
	if q, ok := s.queues.Load(tier); ok {
		return q.(*queue)
	}
	q, _ := s.queues.LoadOrStore(tier, &queue{tier: tier, written: closedChan()})
	return q.(*queue)
}

// acquire finds a head of c's tier serving c's model, holding the request
// until one is routed and has a free slot, its deadline, or the client
// leaves (ctx). It returns the head (acquired) or a refusal; both nil
// means the client left. A request for a model nobody waits for before it
// takes a free head at once; the others wait in the front door, in
// fair-share order: through an outage within their hold, for a busy
// model's heads up to hold_max (or the client's own X-LLM-Hold). Past
// max_held, the least loaded head serving the model takes it in its own
// queue (a busy tier is not an outage); a 503 busy only when none can.
func (s *Server) acquire(ctx context.Context, c *call) (*head, *refusal) {
	q := s.queueOf(c.tier)
	q.mu.Lock()
	t := s.tab.Load()
	if !q.waitsFor(c.model) {
		if h, _ := s.pick(t, c.tier, c.model, c.conv); h != nil {
			q.mu.Unlock()
			return h, nil
		}
	}
	w := &waiter{model: c.model, conv: c.conv, deadline: c.deadline, longest: c.deadline, size: c.size, ch: make(chan grant, 1),
		user: c.id.User, weight: s.weight(c), arrival: c.start}
	if !c.holdAsked {
		w.longest = maxTime(c.deadline, c.start.Add(s.cfg.Load().HoldMax))
	}
	busy := s.full(t, c.tier, c.model)
	v := s.verdict(c.tier, s.until(t, c.tier, w))
	if !v.Hold {
		q.mu.Unlock()
		return nil, &refusal{view: s.view(c.tier), why: v.Why}
	}
	ft := s.tierCfg(c.tier)
	if len(q.waiters) >= ft.MaxHeld || q.bytes+c.size > ft.MaxHeldBytes {
		n := len(q.waiters)
		q.mu.Unlock()
		if h := s.pickQueue(t, c.tier, c.model); h != nil {
			c.why = "past max_held: to the least loaded head's own queue"
			return h, nil
		}
		return nil, &refusal{view: s.view(c.tier), busy: true,
			why: fmt.Sprintf("no hold: %d requests already wait for tier %s (max_held %d, max_held_bytes %d)", n, c.tier, ft.MaxHeld, ft.MaxHeldBytes)}
	}
	if busy {
		c.why = "queued: every head of its model was busy"
	}
	q.waiters = append(q.waiters, w)
	q.waiting.Store(int64(len(q.waiters)))
	q.bytes += w.size
	s.metrics.heldNow.WithLabelValues(c.tier).Inc()
	s.dispatchLocked(q) // earlier waiters may be for models no head serves
	q.mu.Unlock()
	return s.wait(ctx, q, w, c)
}

// waitsFor reports whether a request for model waits in q (a newcomer
// for it goes behind). q.mu is held.
func (q *queue) waitsFor(model string) bool {
	for _, w := range q.waiters {
		if w.model == model {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// wait blocks until w is granted, its deadline passes or ctx ends; a
// granted head is handed on once the request granted before it was
// written (arrival order), and the call closes its own mark when written.
func (s *Server) wait(ctx context.Context, q *queue, w *waiter, c *call) (*head, *refusal) {
	h, ref, g := s.await(ctx, q, w, c)
	if h == nil {
		g.pass()
		return nil, ref
	}
	select {
	case <-g.after:
	case <-ctx.Done():
		g.pass()
		s.release(h)
		return nil, nil
	}
	var once sync.Once
	c.onWritten = func() { once.Do(func() { close(g.written) }) }
	return h, nil
}

// await is wait's first half: the grant, or why none.
func (s *Server) await(ctx context.Context, q *queue, w *waiter, c *call) (*head, *refusal, grant) {
	start := s.now()
	timer := time.NewTimer(w.deadline.Sub(start))
	defer timer.Stop()
	var g grant
	for waiting := true; waiting; {
		waiting = false
		select {
		case g = <-w.ch:
		case <-timer.C:
			if until := s.until(s.tab.Load(), c.tier, w); until.After(s.now()) {
				timer.Reset(until.Sub(s.now())) // its model's heads are busy: the longer bound
				waiting = true
				continue
			}
			if s.leave(q, w) {
				g = grant{refusal: &refusal{view: s.view(c.tier), why: "held until the request's hold ended"}}
			} else {
				g = <-w.ch // granted meanwhile
			}
		case <-ctx.Done():
			if !s.leave(q, w) {
				if g = <-w.ch; g.head != nil {
					s.release(g.head)
				}
			}
			g = grant{after: g.after, written: g.written}
		}
	}
	c.held += s.now().Sub(start)
	return g.head, g.refusal, g
}

// leave takes w out of q; false when the dispatcher already answered it.
func (s *Server) leave(q *queue, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			q.waiting.Store(int64(len(q.waiters)))
			q.bytes -= w.size
			s.metrics.heldNow.WithLabelValues(q.tier).Dec()
			return true
		}
	}
	return false
}

// dispatch answers q's waiters that can be answered now.
func (s *Server) dispatch(q *queue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s.dispatchLocked(q)
}

// dispatchLocked walks q's waiters in order (fair share, or arrival):
// each gets a head serving its model with a free slot if the table has
// one, or its 503 if the hold rule now says no; the others keep their
// place.
func (s *Server) dispatchLocked(q *queue) {
	if len(q.waiters) == 0 {
		return
	}
	t := s.tab.Load()
	gone := make([]bool, len(q.waiters))
	for _, i := range s.order(q) {
		w := q.waiters[i]
		var g grant
		if h, _ := s.pick(t, q.tier, w.model, w.conv); h != nil {
			g = grant{head: h, after: q.written, written: make(chan struct{})}
			q.written = g.written
		} else if v := s.verdict(q.tier, s.until(t, q.tier, w)); !v.Hold {
			g.refusal = &refusal{view: s.view(q.tier), why: v.Why}
		} else {
			continue
		}
		gone[i] = true
		q.bytes -= w.size
		s.metrics.heldNow.WithLabelValues(q.tier).Dec()
		w.ch <- g
	}
	keep := q.waiters[:0]
	for i, w := range q.waiters {
		if !gone[i] {
			keep = append(keep, w)
		}
	}
	clear(q.waiters[len(keep):])
	q.waiters = keep
	q.waiting.Store(int64(len(keep)))
}

// verdict applies the hold rule to tier for a request with deadline.
func (s *Server) verdict(tier string, deadline time.Time) hold.Verdict {
	now := s.now()
	in := hold.Input{View: s.view(tier), Now: now, Deadline: deadline, HoldUnknown: s.cfg.Load().HoldUnknown}
	if !s.tab.Load().routed(tier) {
		s.mu.Lock()
		since, ok := s.reasonSince[tier]
		s.mu.Unlock()
		if ok {
			in.ReasonFor = now.Sub(since)
		}
	}
	return hold.Decide(in)
}

// pick acquires the head of tier serving model for a request of the
// conversation conv (wire.ConversationKey; "" for none): the head that served its
// last turn (affinity.go) when it takes one more now and carries at most
// its slots and its own queue's share above the least loaded; else the
// head with the fewest requests in flight (nginx's least_conn) among those that take one more now
// (head.capacity: its slots and its own queue's share), skipping
// heads that failed within fail_timeout, and heads whose router says the
// model failed while another does not. Ties go round the heads. nil when
// none can take it now; busy then says that heads serve the model but
// every one is full.
func (s *Server) pick(t *table, tier, model, conv string) (h *head, busy bool) {
	now, ttl := s.now(), s.cfg.Load().AffinityTTL
	h, full := s.choose(t, tier, model, s.rr.Add(1), s.affinity.lookup(conv, now, ttl))
	if h != nil {
		h.inFlight.Add(1)
		if ttl > 0 {
			s.affinity.record(conv, h.key, now)
		}
	}
	return h, full
}

// full reports whether heads serve model and every one is full.
func (s *Server) full(t *table, tier, model string) bool {
	_, full := s.choose(t, tier, model, 0, "")
	return full
}

// pickQueue acquires the head of tier serving model with the least load
// (its requests in flight, the front door's and the others'), full or
// not: past max_held a request goes to that head's own queue. nil when no
// head serves the model now (none routed, or all failing).
func (s *Server) pickQueue(t *table, tier, model string) *head {
	now := s.now()
	var best *head
	for _, h := range t.heads[tier] {
		if !h.serves(model) || h.failing(now) {
			continue
		}
		if best == nil || h.load() < best.load() {
			best = h
		}
	}
	if best != nil {
		best.inFlight.Add(1)
	}
	return best
}

// choose is pick's choice, acquiring nothing; ties go to the head first
// from turn (round robin); prefer (a head's key, or "") is the
// conversation's head, taken within its margin of the least loaded.
func (s *Server) choose(t *table, tier, model string, turn uint64, prefer string) (best *head, full bool) {
	hs := t.heads[tier]
	if len(hs) == 0 {
		return nil, false
	}
	now := s.now()
	extra := int64(s.tierCfg(tier).HeadQueue)
	start := int(turn % uint64(len(hs)))
	bestFailed := false
	var pref *head
	for i := range hs {
		h := hs[(start+i)%len(hs)]
		if !h.serves(model) || h.failing(now) {
			continue
		}
		if h.busy(extra) {
			full = true
			continue
		}
		failed := h.failedModel(model)
		if prefer != "" && h.key == prefer && !failed {
			pref = h
		}
		if best == nil || (bestFailed && !failed) ||
			(failed == bestFailed && h.load() < best.load()) {
			best, bestFailed = h, failed
		}
	}
	if best != nil {
		full = false
	}
	if pref != nil && pref != best && !bestFailed && pref.load() <= best.load()+affinityMargin(pref, extra) {
		best = pref
	}
	return best, full
}

// affinityMargin is how much more than the least loaded head a
// conversation's head may carry and still take its next turn: its slots
// and its own queue's share (one, while its slots are not known).
func affinityMargin(h *head, extra int64) int64 {
	n := h.slots.Load()
	if n <= 0 {
		return 1
	}
	return n + ownQueue(n, extra)
}

// release ends a request's use of h; a request waiting for a slot of h's
// tier may go.
func (s *Server) release(h *head) {
	h.inFlight.Add(-1)
	if q, ok := s.queues.Load(h.tier); ok && q.(*queue).waiting.Load() > 0 {
		s.dispatch(q.(*queue))
	}
}
