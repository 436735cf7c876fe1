package share

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter keeps every user's standing against its tier's Limits and asks
// Decide. Admit before a request starts (it counts the request when it
// may), Done when it ends. Safe for concurrent use; its zero value is not
// usable: NewLimiter.
type Limiter struct {
	now   func() time.Time
	mu    sync.Mutex
	def   Limits
	tiers map[string]Limits
	users map[userTier]*standing
	swept time.Time
}

type userTier struct{ tier, user string }

// standing is one user's on one tier: requests admitted and not done, and
// the buckets, made for the limits they were made with.
type standing struct {
	limits   Limits
	inFlight int
	requests *rate.Limiter // nil: no requests_per_minute
	tokens   *rate.Limiter // nil: no tokens_per_minute
}

// NewLimiter returns a Limiter with the default limits def and per-tier
// ones (a tier not in tiers gets def), on the clock now (nil: time.Now).
func NewLimiter(def Limits, tiers map[string]Limits, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	l := &Limiter{now: now, users: map[userTier]*standing{}}
	l.SetLimits(def, tiers)
	return l
}

// SetLimits replaces the limits (a config reload); users' buckets are
// remade, full, when their limits changed.
func (l *Limiter) SetLimits(def Limits, tiers map[string]Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.def, l.tiers = def, tiers
}

// LimitsOf is tier's limits.
func (l *Limiter) LimitsOf(tier string) Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limitsLocked(tier)
}

func (l *Limiter) limitsLocked(tier string) Limits {
	if t, ok := l.tiers[tier]; ok {
		return t
	}
	return l.def
}

// Admit decides whether user may start a request on tier now; when it
// may, the request is counted in flight and in the requests per minute,
// and Done must follow.
func (l *Limiter) Admit(tier, user string) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	s := l.standing(tier, user)
	v := LimitView{Limits: s.limits, InFlight: s.inFlight}
	if s.requests != nil {
		v.Requests = s.requests.TokensAt(now)
	}
	if s.tokens != nil {
		v.Tokens = s.tokens.TokensAt(now)
	}
	d := Decide(v)
	if d.OK {
		s.inFlight++
		if s.requests != nil {
			s.requests.AllowN(now, 1)
		}
	}
	return d
}

// Done ends a request Admit let through, which was served tokens (prompt
// and completion; 0 when it got no answer).
func (l *Limiter) Done(tier, user string, tokens int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s := l.standing(tier, user)
	if s.inFlight > 0 {
		s.inFlight--
	}
	if s.tokens == nil || tokens <= 0 {
		return
	}
	burst := int64(s.tokens.Burst())
	for tokens > 0 { // ReserveN takes at most the burst at a time; the debt adds up
		n := min(tokens, burst)
		s.tokens.ReserveN(now, int(n))
		tokens -= n
	}
}

// standing is user's on tier, made (full) on first use or when the
// tier's limits changed.
func (l *Limiter) standing(tier, user string) *standing {
	k := userTier{tier, user}
	lim := l.limitsLocked(tier)
	s := l.users[k]
	if s != nil && s.limits == lim {
		return s
	}
	n := &standing{limits: lim}
	if s != nil {
		n.inFlight = s.inFlight
	}
	if lim.RequestsPerMinute > 0 {
		n.requests = rate.NewLimiter(rate.Limit(float64(lim.RequestsPerMinute)/60), lim.RequestsPerMinute)
	}
	if lim.TokensPerMinute > 0 {
		n.tokens = rate.NewLimiter(rate.Limit(float64(lim.TokensPerMinute)/60), lim.TokensPerMinute)
	}
	l.users[k] = n
	return n
}

// sweepEvery is how often users with nothing in flight and full buckets
// are dropped (they are made again, full, as they come back).
const sweepEvery = time.Minute

func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.swept) < sweepEvery {
		return
	}
	l.swept = now
	for k, s := range l.users {
		if s.inFlight == 0 && full(s.requests, now) && full(s.tokens, now) {
			delete(l.users, k)
		}
	}
}

func full(r *rate.Limiter, now time.Time) bool {
	return r == nil || r.TokensAt(now) >= float64(r.Burst())
}
