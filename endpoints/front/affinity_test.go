package front

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestConversationStaysOnItsHead (issue 39, item 3): the next turn of a
// conversation goes to the head that served the last one while that head
// carries at most its slots and its own queue's share above the least
// loaded; past that, or with affinity_ttl 0, to the least loaded head.
func TestConversationStaysOnItsHead(t *testing.T) {
	for _, ttl := range []time.Duration{30 * time.Minute, 0} {
		t.Run(fmt.Sprint("affinity_ttl=", ttl), func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.AffinityTTL = ttl })
			a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
			r.route(nil, a, b)
			heads := r.s.tab.Load().heads["fast"]
			for _, h := range heads {
				h.slots.Store(2)
			}
			turn := func(n int) string {
				msgs := `{"role":"user","content":"conv-1"}`
				for i := 1; i < n; i++ {
					msgs += fmt.Sprintf(`,{"role":"assistant","content":"a%d"},{"role":"user","content":"q%d"}`, i, i)
				}
				return `{"model":"qwen-a","messages":[` + msgs + `]}`
			}
			count := func() (int, int) { return len(a.requests()), len(b.requests()) }
			if code, body := r.streamRawBody("/v1/chat/completions", turn(1)); code != http.StatusOK {
				t.Fatalf("turn 1: %d %s", code, body)
			}
			na, _ := count()
			first, other := heads[0], heads[1]
			if na == 0 {
				first, other = heads[1], heads[0]
			}
			// The conversation's head carries 2 more than the other: within its margin (2 slots + 2 queued).
			first.inFlight.Add(2)
			if code, body := r.streamRawBody("/v1/chat/completions", turn(2)); code != http.StatusOK {
				t.Fatalf("turn 2: %d %s", code, body)
			}
			first.inFlight.Add(-2)
			a2, b2 := count()
			stayed := (first == heads[0] && a2 == 2) || (first == heads[1] && b2 == 2)
			if ttl > 0 && !stayed {
				t.Errorf("turn 2 within the margin: heads got %d and %d; want both turns on the conversation's head", a2, b2)
			}
			if ttl == 0 && stayed {
				t.Errorf("affinity off: turn 2 went to the busier head (%d and %d)", a2, b2)
			}
			// Past its margin (5 more than the other), the turn goes to the other head.
			other.inFlight.Store(0)
			first.inFlight.Add(5)
			first.slots.Store(0) // slots unknown: margin 1
			if code, body := r.streamRawBody("/v1/chat/completions", turn(3)); code != http.StatusOK {
				t.Fatalf("turn 3: %d %s", code, body)
			}
			first.inFlight.Add(-5)
			a3, b3 := count()
			if (first == heads[0] && a3 != a2) || (first == heads[1] && b3 != b2) {
				t.Errorf("turn 3 past the margin went to the conversation's head (%d, %d)", a3, b3)
			}
		})
	}
}
