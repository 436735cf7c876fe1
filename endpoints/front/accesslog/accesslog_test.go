package accesslog

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLine pins a line's shape (operators' tools read its keys): the
// client's path quoted, no tier as "-", the tokens and the continuations
// only when there are some, why last and quoted.
func TestLine(t *testing.T) {
	start := time.Date(2026, 11, 24, 10, 0, 0, 123e6, time.UTC)
	for _, c := range []struct {
		name string
		e    Entry
		want string
	}{
		{"rejected", Entry{Start: start, Method: "POST", Path: "/v1/x y", Status: 404, Model: "", Head: "-",
			Outcome: "rejected", Why: `unknown path "/v1/x y"`},
			`2026-11-24T10:00:00.123Z method=POST path="/v1/x y" status=404 tier=- model="" head=- held_ms=0 duration_ms=0 bytes_in=0 bytes_out=0 attempts=0 outcome=rejected user=- account=- auth=anonymous why="unknown path \"/v1/x y\""` + "\n"},
		{"continued", Entry{Start: start, Method: "POST", Path: "/v1/chat/completions", Status: 200, Tier: "fast", Model: "qwen-a",
			Head: "10.0.0.1:8080,10.0.0.2:8080", Held: 1500 * time.Millisecond, Duration: 3 * time.Second, BytesIn: 10, BytesOut: 200,
			Attempts: 1, Outcome: "answered", Continued: 1, Moved: 1, Pause: 40 * time.Millisecond, Prompt: 3, Completion: 5, Counted: true},
			`2026-11-24T10:00:00.123Z method=POST path="/v1/chat/completions" status=200 tier=fast model="qwen-a" head=10.0.0.1:8080,10.0.0.2:8080 held_ms=1500 duration_ms=3000 bytes_in=10 bytes_out=200 attempts=1 outcome=answered user=- account=- auth=anonymous prompt_tokens=3 completion_tokens=5 continued=1 moved=1 restored=0 pause_ms=40` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			c.e.format(&b)
			if d := cmp.Diff(c.want, b.String()); d != "" {
				t.Errorf("line (-want +got):\n%s", d)
			}
		})
	}
}

// lockedBuffer is a writer the test reads while the log writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCloseWritesWhatIsQueued: Close writes every line added before it,
// and a line added after it is dropped and counted, not written.
func TestCloseWritesWhatIsQueued(t *testing.T) {
	var out lockedBuffer
	var dropped int
	l := New(&out, func() { dropped++ })
	for range 100 {
		l.Add(Entry{Method: "GET", Path: "/health", Status: 200, Outcome: "answered"})
	}
	l.Close()
	l.Add(Entry{Method: "GET", Path: "/late", Status: 200, Outcome: "answered"})
	if n := strings.Count(out.String(), "\n"); n != 100 {
		t.Errorf("%d lines written, want 100", n)
	}
	if strings.Contains(out.String(), "/late") || dropped != 1 {
		t.Errorf("the line added after Close: dropped %d times, log has it: %v", dropped, strings.Contains(out.String(), "/late"))
	}
}
