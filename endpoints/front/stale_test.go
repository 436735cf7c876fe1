package front

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// closingHead is a head whose kept-alive connections die under the next
// request: it answers the first request on each connection and closes
// the connection when a second one comes (read, not answered), as a head
// does that closed an idle connection the moment the front door took it
// from its pool (issue 38: after a flood, such connections, several at
// once, made a healthy head "failing" for fail_timeout). The first
// requests wait until want of them are under way, so that the front door
// holds that many connections to it.
type closingHead struct {
	ln       net.Listener
	want     int
	mu       sync.Mutex
	arrived  int
	gate     chan struct{}
	answered atomic.Int64
	closed   atomic.Int64
	marked   atomic.Int64 // requests that came with an Idempotency-Key header
}

func newClosingHead(t *testing.T, want int) *closingHead {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &closingHead{ln: ln, want: want, gate: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(c)
		}
	}()
	return h
}

func (h *closingHead) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	io.Copy(io.Discard, req.Body)
	if _, ok := req.Header["Idempotency-Key"]; ok {
		h.marked.Add(1)
	}
	if req.Method == http.MethodPost {
		h.mu.Lock()
		if h.arrived++; h.arrived == h.want {
			close(h.gate)
		}
		h.mu.Unlock()
		<-h.gate
	}
	status, body := "404 Not Found", `{"error":"no such path"}`
	if req.Method == http.MethodPost {
		status, body = "200 OK", `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
		h.answered.Add(1)
	}
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)
	if req, err := http.ReadRequest(br); err == nil { // the next one on this connection: closed unanswered
		io.Copy(io.Discard, req.Body)
		h.closed.Add(1)
	}
}

// TestStaleKeptAliveConnectionsDoNotFailAHead: a head whose pooled
// connections are closed under the next requests is not at fault; the
// requests go on new connections at once, the head is never skipped as
// failing, and no request waits or gets a 503 for it.
func TestStaleKeptAliveConnectionsDoNotFailAHead(t *testing.T) {
	r := newRig(t, nil)
	const n = 4
	h := newClosingHead(t, n)
	now := time.Now()
	rep := tiers.Report{Time: now, Live: map[string][]endpoints.Server{},
		Views: []tiers.TierView{{Tier: "fast", State: tiers.StateRouted, Reason: tiers.ReasonRouted}}}
	addHead(&rep, "fast", "101", h.ln.Addr().String(), []string{"qwen-a"}, now)
	r.s.Update(rep)
	var wg sync.WaitGroup
	for i := range n { // n connections to the head, all kept alive
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, body := r.do("qwen-a", fmt.Sprint(i)); code != http.StatusOK {
				t.Errorf("warm-up request %d: %d %s", i, code, body)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		code, _, body := r.do("qwen-a", fmt.Sprint("after-", i))
		if code != http.StatusOK || !strings.Contains(body, `"ok"`) {
			t.Fatalf("request %d after the connections died: %d %s", i, code, body)
		}
		for _, ts := range r.s.Status().Tiers {
			for _, hs := range ts.Heads {
				if hs.Failing {
					t.Fatalf("request %d: head %s marked failing for its closed connections (%d closed so far)", i, hs.Addr, h.closed.Load())
				}
			}
		}
	}
	if got := testutil.ToFloat64(r.s.metrics.retries.WithLabelValues("fast", "error")); got != 0 {
		t.Errorf("the head was blamed %v times for connections it closed (retries{reason=\"error\"}); access log:\n%s", got, r.accessLog())
	}
	for _, line := range strings.Split(strings.TrimSpace(r.accessLog()), "\n") {
		if !strings.Contains(line, " held_ms=0 ") {
			t.Errorf("a request waited for the head's closed connections: %s", line)
		}
	}
	if h.closed.Load() == 0 {
		t.Fatal("no kept-alive connection was reused and closed: the test did not test")
	}
	if got := h.marked.Load(); got != 0 {
		t.Errorf("%d requests reached the head with an Idempotency-Key header: the mark is the transport's, never sent", got)
	}
	if got := h.answered.Load(); got != 2*n {
		t.Errorf("head answered %d requests, want %d", got, 2*n)
	}
}
