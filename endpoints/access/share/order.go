// Package share decides, for one tier whose heads are full, which waiting
// request goes next (a fair share across users, weighted, first come first
// served within a user), and whether a user may start one more request now
// (per-user limits: in flight, requests and tokens per minute). The
// decisions are pure functions (Order, Next, Decide) with table tests; the
// types around them (Tracker, Limiter, Weights) only keep the facts they
// need: what each user has on a head and was served lately, the users'
// rate buckets, the Slurm fair-share factors. The package holds no request
// and answers no client: the front door's queue asks it.
package share

import (
	"container/heap"
	"slices"
	"time"
)

// Waiter is one request waiting for a slot of a tier's heads.
type Waiter struct {
	// User is who sent it (the identity's user; "" for anonymous
	// requests, which share one share).
	User string
	// Weight is the user's share relative to the others' (sshare's
	// fair-share factor, or 1); 0 or less counts as 1.
	Weight float64
	// Arrival is when the request came; within a user, earlier goes first.
	Arrival time.Time
}

// Load is what a user has of a tier now: the zero value is nothing.
type Load struct {
	// Serving counts the user's requests on a head of the tier now.
	Serving int
	// Recent is the head time the user was served lately (seconds,
	// decayed: see Tracker), the tie-break between users serving as many.
	Recent float64
}

// weight is w's weight, 1 when unset.
func (w Waiter) weight() float64 {
	if w.Weight > 0 {
		return w.Weight
	}
	return 1
}

// before reports whether a user with load a and weight wa comes before one
// with load b and weight wb: fewer requests on a head per unit of weight
// first, then less head time served lately per unit of weight.
func before(a Load, wa float64, b Load, wb float64) (less, equal bool) {
	sa, sb := float64(a.Serving)/wa, float64(b.Serving)/wb
	if sa != sb {
		return sa < sb, false
	}
	ra, rb := a.Recent/wa, b.Recent/wb
	if ra != rb {
		return ra < rb, false
	}
	return false, true
}

// earlier orders two waiters of the same standing: arrival, then position.
func earlier(ws []Waiter, i, j int) bool {
	if !ws[i].Arrival.Equal(ws[j].Arrival) {
		return ws[i].Arrival.Before(ws[j].Arrival)
	}
	return i < j
}

// Next is the index of the waiter that gets the next free slot, -1 when
// there is none: among the users waiting, the one with the fewest
// requests on a head per unit of weight (then the least head time lately
// per unit of weight); that user's earliest request. With every user equal
// it is arrival order (FIFO), as without fair share.
func Next(waiters []Waiter, loads map[string]Load) int {
	best := -1
	var bestLoad Load
	for i, w := range waiters {
		l := loads[w.User]
		if best < 0 {
			best, bestLoad = i, l
			continue
		}
		less, equal := before(l, w.weight(), bestLoad, waiters[best].weight())
		if less || (equal && earlier(waiters, i, best)) {
			best, bestLoad = i, l
		}
	}
	return best
}

// Order is every waiter's index in the order they should get slots, as if
// each were served in turn (a user's Serving grows by one with each of its
// requests placed): the order a dispatcher walks when several slots free
// at once, or when the first waiters cannot be served yet (their model is
// on no head) and the next ones try. Order(ws, l)[0] is Next(ws, l).
func Order(waiters []Waiter, loads map[string]Load) []int {
	index := map[string]int{}
	h := &userHeap{waiters: waiters}
	for i, w := range waiters {
		u, ok := index[w.User]
		if !ok {
			u = len(h.users)
			index[w.User] = u
			h.users = append(h.users, &queued{load: loads[w.User]})
		}
		h.users[u].queue = append(h.users[u].queue, i)
	}
	for _, u := range h.users {
		slices.SortStableFunc(u.queue, func(a, b int) int {
			switch {
			case earlier(waiters, a, b):
				return -1
			case earlier(waiters, b, a):
				return 1
			}
			return 0
		})
	}
	heap.Init(h)
	out := make([]int, 0, len(waiters))
	for h.Len() > 0 {
		u := h.users[0]
		out = append(out, u.queue[0])
		u.queue = u.queue[1:]
		u.load.Serving++
		if len(u.queue) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return out
}

// queued is one user's waiters in Order, earliest first, and its load as
// its waiters are placed.
type queued struct {
	queue []int
	load  Load
}

// userHeap keeps Order's users with waiters, the next to serve on top.
type userHeap struct {
	waiters []Waiter
	users   []*queued
}

func (h *userHeap) Len() int { return len(h.users) }

func (h *userHeap) Less(i, j int) bool {
	a, b := h.users[i], h.users[j]
	ha, hb := a.queue[0], b.queue[0]
	less, equal := before(a.load, h.waiters[ha].weight(), b.load, h.waiters[hb].weight())
	return less || (equal && earlier(h.waiters, ha, hb))
}

func (h *userHeap) Swap(i, j int) { h.users[i], h.users[j] = h.users[j], h.users[i] }
func (h *userHeap) Push(x any)    { h.users = append(h.users, x.(*queued)) }
func (h *userHeap) Pop() any {
	last := h.users[len(h.users)-1]
	h.users = h.users[:len(h.users)-1]
	return last
}
