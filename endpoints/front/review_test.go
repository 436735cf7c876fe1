package front

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"slurm-llm/endpoints/tiers"
)

// A review's probes (issue 27's edges and issue 28's wiring), kept as
// regression tests: each failed on the code before its fix (front @
// 2c44487).

// streamRawBody posts body to path and returns status and the whole answer.
func (r *rig) streamRawBody(path, body string) (int, string) {
	r.t.Helper()
	resp, err := http.Post(r.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStreamOptionsNullIsCounted: a chat stream whose
// stream_options is null (or any non-object) is marked usageAsked, but
// wire.AskUsage leaves the body as it is, so the head sends no usage chunk: the
// answer's tokens are never counted (metrics, usage, tokens_per_minute).
func TestStreamOptionsNullIsCounted(t *testing.T) {
	for _, opts := range []string{``, `,"stream_options":null`} {
		t.Run(opts, func(t *testing.T) {
			r := newRig(t, nil)
			h := newTestHead(t, "fast", "1", "qwen-a")
			h.tokens = 5
			r.route(nil, h)
			code, body := r.streamRawBody("/v1/chat/completions",
				`{"model":"qwen-a","stream":true`+opts+`,"messages":[{"role":"user","content":"three words here"}]}`)
			if code != http.StatusOK || !strings.Contains(body, "[DONE]") {
				t.Fatalf("%d %s", code, body)
			}
			got := testutil.ToFloat64(r.s.metrics.tokens.WithLabelValues("fast", "qwen-a", "completion"))
			if got != 5 {
				t.Errorf("completion tokens counted %v, want 5 (head saw stream_options %v)", got, h.bodies[0]["stream_options"])
			}
		})
	}
}

// TestStreamOptionsNullIsChargedToTheUser: the same through the
// per-user token limit: a user at tokens_per_minute 5 is refused 429 after
// an 8-token answer, but not when it sends "stream_options": null.
func TestStreamOptionsNullIsChargedToTheUser(t *testing.T) {
	for _, opts := range []string{``, `,"stream_options":null`} {
		t.Run(opts, func(t *testing.T) {
			k := newKeyedRig(t, func(c *Config) { c.Access.Limits.Default.TokensPerMinute = 5 }, "alice")
			h := newTestHead(t, "fast", "1", "qwen-a")
			h.tokens = 5
			k.route(nil, h)
			send := func() int {
				body := `{"model":"qwen-a","stream":true` + opts + `,"messages":[{"role":"user","content":"three words here"}]}`
				code, _, _ := k.postRaw("/v1/chat/completions", body, "Authorization", "Bearer "+k.keys["alice"])
				return code
			}
			if code := send(); code != http.StatusOK {
				t.Fatalf("first: %d", code)
			}
			if code := send(); code != http.StatusTooManyRequests {
				t.Errorf("second request after an 8-token answer at tokens_per_minute 5: %d, want 429", code)
			}
		})
	}
}

// TestBackupStreamIsReadLikeAnyOther: a chat stream answered by
// the backup model is not read by a splicer, so the usage chunk the front
// door asked for reaches a client that did not ask for it (a chunk with
// "choices": [], which clients indexing choices[0] trip on), and its
// tokens are not counted.
func TestBackupStreamIsReadLikeAnyOther(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: time.Second, MaxHeld: 8, MaxHeldBytes: 1 << 20,
			Models: []string{"OR1-Behemoth"}, BackupModel: "qwen-a"}
	})
	fast := newTestHead(t, "fast", "101", "qwen-a")
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonDisabled}}, fast)
	code, body := r.streamRawBody("/v1/chat/completions", `{"model":"OR1-Behemoth","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Contains(body, `"choices":[]`) || strings.Contains(body, `"usage"`) {
		t.Errorf("the client got the usage chunk the front door asked for:\n%s", body)
	}
	if got := testutil.ToFloat64(r.s.metrics.tokens.WithLabelValues("reasoning", "OR1-Behemoth", "completion")); got == 0 {
		t.Errorf("the backup stream's tokens were not counted")
	}
}

// TestFreeHeadIsNotBehindAnotherModelsQueue: a tier serves two
// models on two heads; model a's head is full and max_held of a's requests
// wait. A request for b, whose head is idle, gets the tier's 503 busy.
func TestFreeHeadIsNotBehindAnotherModelsQueue(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := DefaultTier
		ft.MaxHeld, ft.HeadQueue = 1, -1
		c.Tiers["fast"] = ft
	})
	a := newTestHead(t, "fast", "1", "model-a")
	a.setMode("block")
	b := newTestHead(t, "fast", "2", "model-b")
	r.route(nil, a, b)
	for _, h := range r.s.tab.Load().heads["fast"] {
		h.slots.Store(1) // as their /slots say: --parallel 1
	}
	go r.post(nil, "model-a", "a0", false) // on a's only slot
	waitFor(t, "a0 at head a", func() bool { return len(a.requests()) == 1 })
	go r.post(nil, "model-a", "a1", false) // waits for a's slot
	waitFor(t, "a1 held", func() bool { return r.held("fast") == 1 })
	code, _, body := r.do("model-b", "b0")
	if code != http.StatusOK {
		t.Errorf("model-b, whose head is idle: %d %s", code, body)
	}
	r.srv.CloseClientConnections()
}

// TestLongestPrefixWins: prefixes "/qwen" and "/qwen/coder"
// both pass the config check; a path under the longer one goes to either
// tier, by map order.
func TestLongestPrefixWins(t *testing.T) {
	cfg := testConfig()
	f, rs := cfg.Tiers["fast"], cfg.Tiers["reasoning"]
	f.Prefix, rs.Prefix = "/qwen", "/qwen/coder"
	cfg.Tiers["fast"], cfg.Tiers["reasoning"] = f, rs
	s := New(cfg, Options{})
	defer s.Close()
	seen := map[string]int{}
	for range 200 {
		tier, rest := s.prefixed("/qwen/coder/v1/chat/completions")
		seen[tier+" "+rest]++
	}
	if len(seen) != 1 {
		t.Errorf("one path, several routes: %v", seen)
	}
	_, err := parseFront("[front]\nlisten = \"127.0.0.1:1\"\n[front.tiers.fast]\nprefix = \"/qwen\"\n[front.tiers.reasoning]\nprefix = \"/qwen/coder\"\n", "fast", "reasoning")
	t.Logf("config check of the nested prefixes: %v", err)
}

// TestCORSHeadersSurviveAHeads1xx: a head's informational answer (103 Early
// Hints) makes the proxy clear the client's header map, CORS headers
// included; clientWriter swallows the 1xx but not the clear.
func TestCORSHeadersSurviveAHeads1xx(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CORSOrigins = []string{"https://app.example"} })
	h := newTestHead(t, "fast", "1", "qwen-a")
	inner := h.srv.Config.Handler
	h.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/chat/completions" {
			w.Header().Set("Link", "</x.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		inner.ServeHTTP(w, req)
	})
	r.route(nil, h)
	code, hdr, body := r.do("qwen-a", "hi", "Origin", "https://app.example")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	if got := hdr.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("Access-Control-Allow-Origin %q after a head's 103, want the origin (headers %v)", got, hdr)
	}
}

// TestBusyModelExtendsAnEarlierHold: a request queued while its
// model's only head was skipped (failed before answering) keeps the tier's
// hold; once the head is back but full, that request gets 503 at the
// tier's hold, while one that came later (head full: busy) waits until
// hold_max and is served. The earlier request loses its place and gets a
// 503 for a tier that is routed and only busy.
func TestBusyModelExtendsAnEarlierHold(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := DefaultTier
		ft.Hold, ft.HeadQueue = 300*time.Millisecond, -1
		c.Tiers["fast"] = ft
	})
	sh := newSlotHead(t, 1)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	h := r.s.tab.Load().heads["fast"][0]
	go r.do("qwen-a", "b0") // takes the only slot
	waitFor(t, "b0 at the head", func() bool { return len(sh.seen()) == 1 })
	h.failedUntil.Store(time.Now().Add(100 * time.Millisecond).UnixNano()) // another request failed there
	r1 := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r1"); r1 <- code }()
	waitFor(t, "r1 held", func() bool { return r.held("fast") == 1 })
	waitFor(t, "the head no longer skipped", func() bool { return !h.failing(time.Now()) })
	r2 := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r2"); r2 <- code }()
	waitFor(t, "r2 held", func() bool { return r.held("fast") == 2 })
	select {
	case code := <-r1:
		t.Errorf("r1, queued first, answered %d while the routed head was only busy (r2, queued after it, still waits)", code)
	case <-time.After(time.Second): // r1's 300 ms hold is long over
	}
	for range 3 {
		sh.release <- struct{}{}
	}
	if code := <-r2; code != http.StatusOK {
		t.Errorf("r2: %d", code)
	}
}

// TestClientHoldBoundsABusyWait: X-LLM-Hold asks for a hold ("0
// answers at once"); on a busy tier the request is held until hold_max
// whatever it asked.
func TestClientHoldBoundsABusyWait(t *testing.T) {
	r := newRig(t, noHeadQueue)
	sh := newSlotHead(t, 1)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	go r.do("qwen-a", "b0")
	waitFor(t, "b0 at the head", func() bool { return len(sh.seen()) == 1 })
	done := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r0", HoldHeader, "0"); done <- code }()
	select {
	case code := <-done:
		t.Logf("X-LLM-Hold: 0 answered %d", code)
	case <-time.After(10 * time.Second):
		t.Errorf("X-LLM-Hold: 0 on a busy tier: still held after 10 s (held %d; its deadline is hold_max %s)", r.held("fast"), r.s.cfg.Load().HoldMax)
	}
	for range 3 {
		sh.release <- struct{}{}
	}
}

// TestCutHeadIsFreedForTheContinuation: a stream cut on head a
// (a's connection closed; a itself fine) is continued on b; a's in-flight
// count keeps the cut request until the whole continued answer ends, so a,
// idle, looks full (slots 1) and a new request waits behind b.
func TestCutHeadIsFreedForTheContinuation(t *testing.T) {
	r := newRig(t, func(c *Config) { c.FailTimeout = time.Millisecond; noHeadQueue(c) })
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.setMode("cut")
	a.gate, b.gate = make(chan struct{}), make(chan struct{})
	r.route(nil, a)
	go r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
	waitFor(t, "the stream at a", func() bool { return len(a.requests()) == 1 })
	r.route(nil, a, b)
	for _, h := range r.s.tab.Load().heads["fast"] {
		h.slots.Store(1)
	}
	a.gate <- struct{}{} // t1
	a.gate <- struct{}{} // then a closes the connection
	waitFor(t, "the continuation at b", func() bool { return len(b.requests()) == 1 })
	var ha *head
	for _, h := range r.s.tab.Load().heads["fast"] {
		if h.addr == a.addr() {
			ha = h
		}
	}
	t.Logf("a's in-flight count while only b serves the stream: %d", ha.inFlight.Load())
	done := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r"); done <- code }()
	select {
	case code := <-done:
		t.Logf("new request: %d", code)
	case <-time.After(10 * time.Second):
		t.Errorf("a new request waits although head a is idle (a in flight %d, held %d)", ha.inFlight.Load(), r.held("fast"))
		close(b.gate) // the continued stream ends: a is released, r goes
		t.Logf("new request once the continued stream ended: %d", <-done)
		return
	}
	close(b.gate)
}

// TestHeldContinuationIsWrittenWhenSent: a held
// continuation marks itself written only when its head's answer header
// came back (start calls c.written after RoundTrip), not when the request
// was written; every held request granted after it waits that long (a
// head that sends its header after the prompt is processed: seconds on a
// long continuation prompt).
func TestHeldContinuationIsWrittenWhenSent(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.setMode("cut")
	a.gate = make(chan struct{})
	slow := make(chan struct{})
	var atB syncBuf // what reached b, in order
	inner := b.srv.Config.Handler
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(strings.NewReader(string(raw)))
		if strings.Contains(string(raw), `"continue_final_message"`) {
			atB.Write([]byte("continuation "))
			select { // the continuation's header waits (prompt processing)
			case <-slow:
			case <-req.Context().Done():
				return
			}
		}
		if !strings.Contains(string(raw), `"continue_final_message"`) {
			atB.Write([]byte("r "))
		}
		inner.ServeHTTP(w, req)
	})
	r.route(nil, a)
	go r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
	waitFor(t, "the stream at a", func() bool { return len(a.requests()) == 1 })
	a.gate <- struct{}{}
	a.gate <- struct{}{} // a cuts; a is skipped (fail_timeout): the continuation is held
	waitFor(t, "the continuation held", func() bool { return r.held("fast") == 1 })
	done := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r"); done <- code }()
	waitFor(t, "r held", func() bool { return r.held("fast") == 2 })
	r.route(nil, a, b) // b comes: both are granted b, the continuation first
	select {
	case code := <-done:
		t.Logf("r: %d", code)
	case <-time.After(10 * time.Second):
		t.Errorf("r, granted head b, was not sent in 10 s: it waits for the continuation's answer header (b saw: %s)", atB.String())
		close(slow)
		t.Logf("r once b answered the continuation's header: %d (b saw: %s)", <-done, atB.String())
		return
	}
	close(slow)
}

// TestAliasUnderAPrefixIsRewritten: [front.aliases] says the
// body's model is rewritten before it is sent; under a tier's prefix it is
// not: the front door routes by the alias's model (qwen-b) and the head, a
// router serving two models, reads the alias.
func TestAliasUnderAPrefixIsRewritten(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["fast"]
		ft.Prefix = "/fast"
		c.Tiers["fast"] = ft
		c.Aliases = map[string]string{"gpt-4o": "qwen-b"}
	})
	fast := newTestHead(t, "fast", "1", "qwen-a", "qwen-b")
	r.route(nil, fast)
	for _, path := range []string{"/v1/chat/completions", "/fast/v1/chat/completions"} {
		code, _, body := r.postRaw(path, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		fast.mu.Lock()
		got := fast.bodies[len(fast.bodies)-1]["model"]
		fast.mu.Unlock()
		if got != "qwen-b" {
			t.Errorf("%s: the head read model %v, want qwen-b (the alias's model the front door routed by)", path, got)
		}
	}
}

// TestPastMaxHeldGoesToTheHeadsQueue: past max_held, a request for a
// routed head that is only busy got a 503 busy (issue 38: 240 of 742
// requests, while nginx answered those seconds with 200); it goes to the
// least loaded head's own queue instead, and is answered once the head
// gets to it. Only a tier with no head serving the model answers 503 busy.
func TestPastMaxHeldGoesToTheHeadsQueue(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := DefaultTier
		ft.MaxHeld, ft.HeadQueue = 1, -1
		c.Tiers["fast"] = ft
	})
	sh := newSlotHead(t, 1)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	go r.do("qwen-a", "r0")
	waitFor(t, "r0 at the head", func() bool { return len(sh.seen()) == 1 })
	go r.do("qwen-a", "r1")
	waitFor(t, "r1 held", func() bool { return r.held("fast") == 1 })
	r2 := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r2"); r2 <- code }()
	waitFor(t, "r2 at the head, past max_held", func() bool { return len(sh.seen()) == 2 })
	if got := sh.seen()[1]; got != "r2" {
		t.Errorf("the head saw %v, want r2 second (sent past max_held)", sh.seen())
	}
	for range 3 {
		sh.release <- struct{}{}
	}
	if code := <-r2; code != http.StatusOK {
		t.Errorf("r2 past max_held: %d, want 200 from the head's own queue", code)
	}
	waitFor(t, "r1 at the head", func() bool { return len(sh.seen()) == 3 })
	if !strings.Contains(r.accessLog(), "past max_held") {
		t.Errorf("the access log does not say why r2 went to a full head:\n%s", r.accessLog())
	}
}

// TestPastMaxHeldWithoutAHeadIsBusy: past max_held, a tier with no head
// serving the model (all failing) answers 503 busy at once.
func TestPastMaxHeldWithoutAHeadIsBusy(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := DefaultTier
		ft.MaxHeld = 1
		c.Tiers["fast"] = ft
		c.FailTimeout = time.Minute
	})
	a := newTestHead(t, "fast", "1", "qwen-a")
	r.route(nil, a)
	r.s.markFailing(r.s.tab.Load().heads["fast"][0])
	go r.do("qwen-a", "r0", HoldHeader, "1s")
	waitFor(t, "r0 held", func() bool { return r.held("fast") == 1 })
	if code, hdr, body := r.do("qwen-a", "r1"); code != http.StatusServiceUnavailable || !strings.Contains(body, "busy") || hdr.Get("Retry-After") == "" {
		t.Errorf("r1 past max_held, no head serving: %d %s, want 503 busy with Retry-After", code, body)
	}
}

// TestCompletionsStreamIsCounted: a /v1/completions stream is
// neither spliced nor sniffed: its tokens are never counted, even with the
// usage chunk asked by the client, so tokens_per_minute never sees them.
func TestCompletionsStreamIsCounted(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.tokens = 5
	r.route(nil, h)
	code, body := r.streamRawBody("/v1/completions", `{"model":"qwen-a","stream":true,"stream_options":{"include_usage":true},"prompt":"hi"}`)
	if code != http.StatusOK || !strings.Contains(body, `"usage"`) {
		t.Fatalf("%d %s", code, body)
	}
	if got := testutil.ToFloat64(r.s.metrics.tokens.WithLabelValues("fast", "qwen-a", "completion")); got != 5 {
		t.Errorf("completion tokens counted %v, want 5 (the usage chunk the client got says 5)", got)
	}
}

// TestBlankLinesDoNotStallABufferedEvent: Read coalesces the events
// already buffered; eventBuffered looks for "\n\n" anywhere in the buffer,
// so blank lines after an event (SSE allows any number) followed by part
// of the next event make stream.ReadEvent wait for the head, holding back the
// event already read.
func TestBlankLinesDoNotStallABufferedEvent(t *testing.T) {
	for _, sep := range []string{"\n\n", "\n\n\n\n"} {
		t.Run(fmt.Sprintf("%q", sep), func(t *testing.T) {
			r := newRig(t, nil)
			gate := make(chan struct{})
			head := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path != "/v1/chat/completions" {
					http.NotFound(w, req)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				chunk := func(text string) string {
					return fmt.Sprintf(`data: {"id":"x","created":1,"model":"qwen-a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, text)
				}
				fmt.Fprint(w, chunk("first")+sep+chunk("second")[:20])
				w.(http.Flusher).Flush()
				select {
				case <-gate:
				case <-req.Context().Done():
					return
				}
				fmt.Fprint(w, chunk("second")[20:]+"\n\n"+`data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
			}))
			defer head.Close()
			defer close(gate)
			r.route(nil, &testHead{tier: "fast", job: "1", models: []string{"qwen-a"}, srv: head})
			resp, err := r.post(nil, "qwen-a", "hi", true)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(resp.Body).ReadString('\n')
				got <- line
			}()
			select {
			case line := <-got:
				t.Logf("first event: %.60s", line)
			case <-time.After(10 * time.Second):
				t.Errorf("the first event, whole at the front door, did not reach the client in 10 s")
			}
		})
	}
}

// TestHeldRequestGoesWhenAFailingHeadRecovers: a request held because the
// only head of its model was marked failing (fail_timeout) goes to that
// head once the timeout ends, without waiting for anything else to happen
// on the tier (it waited for another head's whole answer, or its hold:
// TestCutHeadIsFreedForTheContinuation failed 15 runs in 1,200 under load).
func TestHeldRequestGoesWhenAFailingHeadRecovers(t *testing.T) {
	r := newRig(t, func(c *Config) { c.FailTimeout = 200 * time.Millisecond })
	a := newTestHead(t, "fast", "1", "qwen-a")
	r.route(nil, a)
	r.s.markFailing(r.s.tab.Load().heads["fast"][0])
	done := make(chan int, 1)
	go func() { code, _, _ := r.do("qwen-a", "r"); done <- code }()
	select {
	case code := <-done:
		if code != 200 || len(a.requests()) != 1 {
			t.Errorf("answered %d, head saw %v; want 200 from a", code, a.requests())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the request is still held 20 s after its head's fail_timeout (200 ms) ended (held %d)", r.held("fast"))
	}
}

// TestHeadQueueTakesAFreedSlotAtOnce: on a head of 2 slots, the front door
// held every request past the slots and sent the next only once an answer
// had come back through it, so each freed slot stood idle for a round
// trip (issue 38: +6 ms p50 at 16 clients on a real head). With the
// default head_queue, as many as the head has slots wait in its own queue
// (llama-server takes one in the loop that frees a slot) and only the
// rest in the front door; each answer lets one more go to the head.
func TestHeadQueueTakesAFreedSlotAtOnce(t *testing.T) {
	r := newRig(t, nil)
	sh := newSlotHead(t, 2)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	done := make(chan int, 6)
	for i := range 6 {
		go func() { code, _, _ := r.do("qwen-a", fmt.Sprint("r", i)); done <- code }()
	}
	waitFor(t, "4 at the head (2 slots, 2 in its queue), 2 held", func() bool {
		return len(sh.seen()) == 4 && r.held("fast") == 2
	})
	sh.release <- struct{}{}
	waitFor(t, "one more at the head", func() bool { return len(sh.seen()) == 5 && r.held("fast") == 1 })
	for range 5 {
		sh.release <- struct{}{}
	}
	for range 6 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("answered %d", code)
		}
	}
}
