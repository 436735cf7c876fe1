package share

import (
	"math"
	"sync"
	"time"
)

// DefaultHalfLife is how fast head time served is forgotten when
// NewTracker is given none.
const DefaultHalfLife = 10 * time.Minute

// Tracker keeps each tier's Loads: the requests each user has on a head
// now (Begin … End) and the head time each was served lately, halved
// every half-life, so that of two users with as many requests on a head,
// the one served less lately goes first. Safe for concurrent use.
type Tracker struct {
	halfLife time.Duration
	now      func() time.Time
	mu       sync.Mutex
	tiers    map[string]map[string]*tracked
}

type tracked struct {
	serving int
	recent  float64
	at      time.Time // when recent was last decayed
}

// NewTracker returns a Tracker forgetting with halfLife (0:
// DefaultHalfLife) on the clock now (nil: time.Now).
func NewTracker(halfLife time.Duration, now func() time.Time) *Tracker {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	if now == nil {
		now = time.Now
	}
	return &Tracker{halfLife: halfLife, now: now, tiers: map[string]map[string]*tracked{}}
}

// Begin counts one request of user on a head of tier.
func (t *Tracker) Begin(tier, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.user(tier, user, t.now())
	u.serving++
}

// End ends a request Begin counted, which was on its head for served.
func (t *Tracker) End(tier, user string, served time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	u := t.user(tier, user, now)
	if u.serving > 0 {
		u.serving--
	}
	u.recent += max(served, 0).Seconds()
	t.prune(tier, now)
}

// Loads is tier's load of every user with a request on a head or served
// lately.
func (t *Tracker) Loads(tier string) map[string]Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	out := make(map[string]Load, len(t.tiers[tier]))
	for name, u := range t.tiers[tier] {
		t.decay(u, now)
		out[name] = Load{Serving: u.serving, Recent: u.recent}
	}
	return out
}

// user is tier's entry for name, made on first use and decayed to now.
func (t *Tracker) user(tier, name string, now time.Time) *tracked {
	users := t.tiers[tier]
	if users == nil {
		users = map[string]*tracked{}
		t.tiers[tier] = users
	}
	u := users[name]
	if u == nil {
		u = &tracked{at: now}
		users[name] = u
	}
	t.decay(u, now)
	return u
}

// decay halves u's recent time for every half-life since it was decayed.
func (t *Tracker) decay(u *tracked, now time.Time) {
	if d := now.Sub(u.at); d > 0 {
		u.recent *= math.Exp2(-float64(d) / float64(t.halfLife))
		u.at = now
	}
}

// forgotten is the recent time below which an idle user is dropped (a
// hundredth of a second of head time).
const forgotten = 0.01

// prune drops tier's users with nothing on a head and next to nothing
// served lately, so that the map stays as small as the users active.
func (t *Tracker) prune(tier string, now time.Time) {
	for name, u := range t.tiers[tier] {
		t.decay(u, now)
		if u.serving == 0 && u.recent < forgotten {
			delete(t.tiers[tier], name)
		}
	}
}
