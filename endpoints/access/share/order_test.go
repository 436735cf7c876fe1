package share

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func TestOrder(t *testing.T) {
	tests := []struct {
		name    string
		waiters []Waiter
		loads   map[string]Load
		want    []int
	}{
		{name: "nobody waits", want: []int{}},
		{name: "one user: arrival order",
			waiters: []Waiter{{User: "a", Arrival: at(3)}, {User: "a", Arrival: at(1)}, {User: "a", Arrival: at(2)}},
			want:    []int{1, 2, 0}},
		{name: "equal users, nothing served: FIFO across users",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "b", Arrival: at(2)}, {User: "a", Arrival: at(3)}, {User: "b", Arrival: at(4)}},
			want:    []int{0, 1, 2, 3}},
		{name: "a flood by one user does not pass another's single request",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "a", Arrival: at(2)}, {User: "a", Arrival: at(3)}, {User: "b", Arrival: at(9)}},
			loads:   map[string]Load{"a": {Serving: 2}},
			want:    []int{3, 0, 1, 2}},
		{name: "turns alternate while both wait",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "a", Arrival: at(2)}, {User: "a", Arrival: at(3)}, {User: "b", Arrival: at(4)}, {User: "b", Arrival: at(5)}},
			want:    []int{0, 3, 1, 4, 2}},
		{name: "twice the weight, twice the slots",
			waiters: []Waiter{{User: "a", Weight: 2, Arrival: at(1)}, {User: "a", Weight: 2, Arrival: at(2)}, {User: "a", Weight: 2, Arrival: at(3)},
				{User: "b", Weight: 1, Arrival: at(4)}, {User: "b", Weight: 1, Arrival: at(5)}},
			loads: map[string]Load{"a": {Serving: 2}, "b": {Serving: 1}},
			// a: 2/2=1, b: 1/1=1, tie → recent equal → earliest arrival (a); then a 3/2 > b 1 → b; ...
			want: []int{0, 3, 1, 2, 4}},
		{name: "equal on heads: the one served less lately first",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "b", Arrival: at(2)}},
			loads:   map[string]Load{"a": {Serving: 1, Recent: 300}, "b": {Serving: 1, Recent: 5}},
			want:    []int{1, 0}},
		{name: "on heads outweighs served lately",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "b", Arrival: at(2)}},
			loads:   map[string]Load{"a": {Serving: 0, Recent: 3000}, "b": {Serving: 1}},
			want:    []int{0, 1}},
		{name: "anonymous requests are one user",
			waiters: []Waiter{{User: "", Arrival: at(1)}, {User: "", Arrival: at(2)}, {User: "c", Arrival: at(3)}},
			loads:   map[string]Load{"": {Serving: 1}},
			want:    []int{2, 0, 1}},
		{name: "same arrival: position decides",
			waiters: []Waiter{{User: "a", Arrival: at(1)}, {User: "b", Arrival: at(1)}},
			want:    []int{0, 1}},
		{name: "no weight counts as 1",
			waiters: []Waiter{{User: "a", Weight: 0, Arrival: at(1)}, {User: "b", Weight: 1, Arrival: at(2)}},
			loads:   map[string]Load{"a": {Serving: 1}, "b": {Serving: 1}},
			want:    []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Order(tt.waiters, tt.loads)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Order (-want +got):\n%s", d)
			}
			next := Next(tt.waiters, tt.loads)
			wantNext := -1
			if len(tt.want) > 0 {
				wantNext = tt.want[0]
			}
			if next != wantNext {
				t.Errorf("Next = %d, want %d (Order's first)", next, wantNext)
			}
		})
	}
}

// simulate serves a tier with slots slots and a fixed service time: user
// a keeps flood requests outstanding from the start, user b sends one at a
// time (the next when the last is answered) until it has sent n; it
// returns b's waits for a slot, with fair share (Next) or in arrival order.
func simulate(slots, flood, n int, service time.Duration, fair bool) []time.Duration {
	type req struct {
		w   Waiter
		end time.Time
	}
	now := t0
	var waiting []Waiter
	for i := 0; i < flood; i++ {
		waiting = append(waiting, Waiter{User: "a", Arrival: now.Add(time.Duration(i))})
	}
	waiting = append(waiting, Waiter{User: "b", Arrival: now.Add(time.Duration(flood))})
	var serving []req
	var waits []time.Duration
	sent := 1
	for len(waits) < n {
		for len(serving) < slots && len(waiting) > 0 {
			i := 0
			if fair {
				loads := map[string]Load{}
				for _, r := range serving {
					l := loads[r.w.User]
					l.Serving++
					loads[r.w.User] = l
				}
				i = Next(waiting, loads)
			}
			w := waiting[i]
			waiting = append(waiting[:i], waiting[i+1:]...)
			if w.User == "b" {
				waits = append(waits, now.Sub(w.Arrival))
			}
			serving = append(serving, req{w: w, end: now.Add(service)})
		}
		// the earliest end frees its slot
		e := 0
		for i, r := range serving {
			if r.end.Before(serving[e].end) {
				e = i
			}
		}
		done := serving[e]
		serving = append(serving[:e], serving[e+1:]...)
		now = done.end
		if done.w.User == "a" { // a keeps its flood outstanding
			waiting = append(waiting, Waiter{User: "a", Arrival: now})
		} else if sent < n {
			waiting = append(waiting, Waiter{User: "b", Arrival: now})
			sent++
		}
	}
	return waits
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// TestFairShareAgainstFIFO: one head with 2 slots, a 10 s answer; user a
// keeps 40 requests outstanding, user b sends one at a time. With fair
// share b waits at most one answer's time for a slot; in arrival order it
// waits behind a's queue (about 40 answers over 2 slots).
func TestFairShareAgainstFIFO(t *testing.T) {
	const service = 10 * time.Second
	fair := simulate(2, 40, 20, service, true)
	fifo := simulate(2, 40, 20, service, false)
	for i, w := range fair {
		if w > service {
			t.Errorf("fair share: b's request %d waited %s, more than one answer (%s)", i, w, service)
		}
	}
	if m := median(fifo); m < 19*service {
		t.Errorf("FIFO: b's median wait %s, want it behind a's queue (≥ %s)", m, 19*service)
	}
}

// BenchmarkFairShareWait reports user b's median wait for a slot in the
// simulated flood (fair share and FIFO), and Order's cost on a full
// queue of 256 waiters from 16 users.
func BenchmarkFairShareWait(b *testing.B) {
	const service = 10 * time.Second
	var fair, fifo []time.Duration
	for i := 0; i < b.N; i++ {
		fair = simulate(2, 40, 50, service, true)
		fifo = simulate(2, 40, 50, service, false)
	}
	b.ReportMetric(median(fair).Seconds(), "fair-median-wait-s")
	b.ReportMetric(median(fifo).Seconds(), "fifo-median-wait-s")
}

func BenchmarkOrder256(b *testing.B) {
	ws := make([]Waiter, 256)
	loads := map[string]Load{}
	for i := range ws {
		u := string(rune('a' + i%16))
		ws[i] = Waiter{User: u, Weight: 1, Arrival: at(i)}
		loads[u] = Load{Serving: i % 3, Recent: float64(i)}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Order(ws, loads)
	}
}

func BenchmarkNext256(b *testing.B) {
	ws := make([]Waiter, 256)
	loads := map[string]Load{}
	for i := range ws {
		u := string(rune('a' + i%16))
		ws[i] = Waiter{User: u, Weight: 1, Arrival: at(i)}
		loads[u] = Load{Serving: i % 3, Recent: float64(i)}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Next(ws, loads)
	}
}
