package front

import (
	"sync"
	"time"
)

// A conversation's next turn goes to the head that served its last one:
// that head's llama-server still holds the conversation's prompt in its
// cache (cache_prompt, on by default, and its prompt cache in RAM) and
// evaluates only the new turn, where another replica evaluates the whole
// conversation again (issue 39: a 32K-token conversation is minutes of
// prompt processing on the site's 72B). Among a model's heads, a request
// whose conversation a head served within affinity_ttl goes there, unless
// that head is full or carries more than its slots (and its own queue's
// share) above the least loaded one: affinity never makes a hot spot.
// Everything else goes to the least loaded head, as before.
//
// A conversation is known by its beginning, which every turn repeats
// (wire.ConversationKey): two conversations that open alike share a head,
// and the cached prefix with it.

// affinityMax bounds the conversations remembered (two generations of
// half as many).
const affinityMax = 1 << 16

// affinity remembers, per conversation key, the head (head.key) that
// served its last turn and when. Two generations: when the current one
// holds affinityMax/2 keys it becomes the previous one and the oldest
// keys go, so memory is bounded and a lookup or a record costs O(1).
type affinity struct {
	mu        sync.Mutex
	cur, prev map[string]affinityEntry
}

type affinityEntry struct {
	head string
	at   time.Time
}

// lookup is the head that served key within ttl of now ("" for none).
func (a *affinity) lookup(key string, now time.Time, ttl time.Duration) string {
	if key == "" || ttl <= 0 {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.cur[key]
	if !ok {
		e, ok = a.prev[key]
	}
	if !ok || now.Sub(e.at) > ttl {
		return ""
	}
	return e.head
}

// record notes that head serves key's conversation now.
func (a *affinity) record(key, head string, now time.Time) {
	if key == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil || len(a.cur) >= affinityMax/2 {
		a.prev, a.cur = a.cur, make(map[string]affinityEntry)
	}
	a.cur[key] = affinityEntry{head: head, at: now}
}
