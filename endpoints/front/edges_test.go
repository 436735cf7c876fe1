package front

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The front door's edges (issue 27, item 4): each test pins a defect a
// review found and a probe confirmed, in one sentence.

// postRaw sends body to path with the headers given, and reads the answer.
func (r *rig) postRaw(path, body string, hdr ...string) (int, http.Header, string) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestExpectContinueIsNotPassedOn: a client's Expect: 100-continue (curl
// sends it for bodies over 1 MiB) reached the head, whose 100 Continue
// marked the call sent, so its loading 503 was neither retried nor held
// and the client got an empty 200.
func TestExpectContinueIsNotPassedOn(t *testing.T) {
	r := newRig(t, nil)
	loading, other := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	loading.setMode("503")
	r.route(nil, loading)
	body := `{"model":"qwen-a","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`
	go func() {
		waitFor(t, "a request at the loading head", func() bool { return len(loading.requests()) > 0 })
		r.route(nil, loading, other)
	}()
	code, _, got := r.postRaw("/v1/chat/completions", body, "Expect", "100-continue")
	if code != http.StatusOK || !strings.Contains(got, "from 2") {
		t.Fatalf("got %d %.200q, want the other head's answer", code, got)
	}
	for _, h := range loading.headers {
		if v := h.Get("Expect"); v != "" {
			t.Errorf("the head got Expect: %s", v)
		}
	}
}

// TestBodyThatIsNotAnObject: a JSON null body with default_model set
// panicked the handler (the client saw EOF); every body that is not one
// JSON object is a 400.
func TestBodyThatIsNotAnObject(t *testing.T) {
	r := newRig(t, func(c *Config) { c.DefaultModel = "qwen-a" })
	r.route(nil, newTestHead(t, "fast", "1", "qwen-a"))
	for _, body := range []string{`null`, `[]`, `"qwen-a"`, `3`, `{"model":"qwen-a"`, `{"model":"qwen-a"} x`, ``} {
		if code, _, got := r.postRaw("/v1/chat/completions", body); code != http.StatusBadRequest || !strings.Contains(got, "invalid_request_error") {
			t.Errorf("body %q: got %d %q, want 400", body, code, got)
		}
	}
	if code, _, got := r.postRaw("/completion", `{"prompt":"hi"}`); code != http.StatusOK {
		t.Errorf("no model, default_model set: got %d %q", code, got)
	}
}

// TestModelKeyIsExact: {"model":"a","MODEL":"b"} was routed by b (Go's
// case-insensitive decoding) while the head read model: a.
func TestModelKeyIsExact(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "reasoning", "2", "big")
	r.route(nil, a, b)
	code, hdr, got := r.postRaw("/v1/chat/completions", `{"model":"qwen-a","MODEL":"big","messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusOK || hdr.Get(TierHeader) != "fast" {
		t.Errorf("got %d from tier %q (%s), want tier fast", code, hdr.Get(TierHeader), got)
	}
	if code, _, got := r.postRaw("/v1/chat/completions", `{"model":"qwen-a","model":"big"}`); code != http.StatusBadRequest {
		t.Errorf("model twice: got %d %q, want 400", code, got)
	}
	if code, hdr, _ := r.postRaw("/v1/chat/completions", `{"mod\u0065l":"big","messages":[]}`); code != http.StatusOK || hdr.Get(TierHeader) != "reasoning" {
		t.Errorf("an escaped key: got %d from %q, want the tier of big", code, hdr.Get(TierHeader))
	}
}

// TestClientLeavingMidStreamIsCancelled: a client that left mid-stream was
// logged answered or cut and counted as the head's mid-answer error.
func TestClientLeavingMidStreamIsCancelled(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.gate, h.tokens = make(chan struct{}), 50
	r.route(nil, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"qwen-a","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	<-h.left
	waitFor(t, "the access line", func() bool { return strings.Contains(r.accessLog(), "outcome=") })
	if line := r.accessLog(); !strings.Contains(line, "outcome=cancelled") {
		t.Errorf("access log: want outcome=cancelled:\n%s", line)
	}
	if n := testutil.ToFloat64(r.s.metrics.upErrors.WithLabelValues("fast", "mid_answer")); n != 0 {
		t.Errorf("the head was blamed: mid_answer errors = %v", n)
	}
}

// blockingWriter blocks every write until released.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       strings.Builder
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestAccessLogIsOffTheAnswerPath: the access line was written before the
// answer left the server's buffer, so a slow journal slowed every answer
// (a 200 ms write delayed the headers by 216 ms); here a writer that never
// returns until the end must not hold any answer.
func TestAccessLogIsOffTheAnswerPath(t *testing.T) {
	r := newRig(t, nil)
	slow := &blockingWriter{release: make(chan struct{})}
	r.s = New(*r.s.cfg.Load(), Options{AccessLog: slow})
	r.srv.Config.Handler = r.s
	r.route(nil, newTestHead(t, "fast", "1", "qwen-a"))
	for i := range 3 {
		if code, _, got := r.postRaw("/v1/chat/completions", `{"model":"qwen-a","messages":[{"role":"user","content":"hi"}]}`); code != http.StatusOK {
			t.Fatalf("request %d: %d %q", i, code, got)
		}
	}
	close(slow.release)
	r.s.Close()
	if n := strings.Count(slow.b.String(), "\n"); n != 3 {
		t.Errorf("%d access lines, want 3:\n%s", n, slow.b.String())
	}
}

// TestEchoedNamesAreCut: an unknown model name was echoed whole into the
// 404 and the access line (a 768 KiB name gave a 1.8 MB answer).
func TestEchoedNamesAreCut(t *testing.T) {
	r := newRig(t, nil)
	r.route(nil, newTestHead(t, "fast", "1", "qwen-a"))
	name := strings.Repeat("é", 384<<10)
	code, _, got := r.postRaw("/v1/chat/completions", `{"model":"`+name+`","messages":[]}`)
	if code != http.StatusNotFound || len(got) > 2048 {
		t.Errorf("got %d with %d bytes, want a 404 of at most 2 KiB", code, len(got))
	}
	if line := r.accessLog(); len(line) > 2048 || !strings.Contains(line, "status=404") {
		t.Errorf("access line of %d bytes, want at most 2 KiB: %.300s", len(line), line)
	}
	if code, _, got := r.postRaw("/"+strings.Repeat("p", 60<<10), `{}`); code != http.StatusNotFound || len(got) > 2048 {
		t.Errorf("a long unknown path: got %d with %d bytes", code, len(got))
	}
}

// TestContinuationsCountedOnceAccepted: a continuation was counted before
// its head took it, so a refused attempt used up max_continuations and
// inflated the log.
func TestContinuationsCountedOnceAccepted(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxContinuations = 1 })
	a, refusing, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a"), newTestHead(t, "fast", "3", "qwen-a")
	a.tokens, b.tokens = 6, 6
	refusing.setMode("503")
	got := r.cutThen(a, func() {
		r.route(nil, a, refusing)
		go func() {
			waitFor(t, "the refusing head asked", func() bool { return len(refusing.requests()) > 0 })
			r.route(nil, a, refusing, b)
		}()
	}, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
	})
	if !got.done || got.errEvent != "" {
		t.Fatalf("answer: %+v: want one whole answer", got)
	}
	results := map[string]float64{}
	for _, res := range []string{resultContinued, resultFailed, resultRefused} {
		results[res] = testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", res, "false"))
	}
	if d := cmp.Diff(map[string]float64{resultContinued: 1, resultFailed: 0, resultRefused: 0}, results); d != "" {
		t.Errorf("continuations (-want +got):\n%s", d)
	}
	if line := r.accessLog(); !strings.Contains(line, "continued=1 ") {
		t.Errorf("access log: want continued=1:\n%s", line)
	}
}

// TestOneResultForAFailedContinuation: a stream whose continuation every
// head tried refused was counted failed and refused both.
func TestOneResultForAFailedContinuation(t *testing.T) {
	r := newRig(t, nil)
	a := newTestHead(t, "fast", "1", "qwen-a")
	heads := []*testHead{a}
	for i := range maxAttempts {
		h := newTestHead(t, "fast", fmt.Sprint(10+i), "qwen-a")
		h.setMode("503")
		heads = append(heads, h)
	}
	got := r.cutThen(a, func() { r.route(nil, heads...) },
		func() (answer, error) {
			return r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
		})
	if got.errEvent == "" {
		t.Fatalf("answer %+v: want an error event", got)
	}
	for res, want := range map[string]float64{resultFailed: 1, resultRefused: 0, resultContinued: 0} {
		if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", res, "false")); n != want {
			t.Errorf("%s = %v, want %v", res, n, want)
		}
	}
}

// TestAHeadsErrorFieldEndsTheAnswer: llama.cpp builds that send an
// in-stream error as an "error:" field or as "event: error" had the line
// passed on and the answer continued on another head, as if cut.
func TestAHeadsErrorFieldEndsTheAnswer(t *testing.T) {
	for _, mode := range []string{"errfield", "errevent"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, nil)
			a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
			a.setMode(mode)
			a.tokens = 6
			var raw []byte
			r.cutOnto(a, b, func() (answer, error) {
				resp, err := r.post(nil, "qwen-a", "hi", true)
				if err == nil {
					raw, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				return answer{}, err
			})
			if !strings.Contains(string(raw), "the head failed") || strings.Contains(string(raw), "slurm-llm: continued") {
				t.Errorf("answer:\n%s\nwant the head's error passed on, not continued", raw)
			}
			if n := len(b.requests()); n != 0 {
				t.Errorf("another head got %d requests", n)
			}
		})
	}
}

// TestMultiLineEventsOfAContinuation: a continuation's events of several
// data lines were dropped.
func TestMultiLineEventsOfAContinuation(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.setMode("cut")
	a.tokens, b.tokens = 6, 6
	b.multiline = true
	got := r.cutOnto(a, b, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
	})
	if want := "t0 t1 t2 t3 t4 t5 t6 t7 "; got.text != want || !got.done { // t2… from b
		t.Errorf("text %q (done %v), want %q", got.text, got.done, want)
	}
}

// TestContinuationKeepsTheClientsHeaders: a continuation was sent with
// Content-Type alone, so a head run with --api-key refused it.
func TestContinuationKeepsTheClientsHeaders(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	r.cutOnto(a, b, func() (answer, error) {
		resp, err := r.post(nil, "qwen-a", "hi", true, "Authorization", "Bearer head-key", HoldHeader, "10s")
		if err == nil {
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return answer{}, err
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.headers) == 0 {
		t.Fatal("no continuation reached the other head")
	}
	for _, h := range b.headers {
		if h.Get("Authorization") != "Bearer head-key" || h.Get(HoldHeader) != "" {
			t.Errorf("continuation headers: %v", h)
		}
	}
}

// TestContinuationLimitCountsTokensNotChunks: max_tokens was lowered by the
// chunks the client got, so a chunk carrying two tokens (llama-server holds
// back a token that ends inside a UTF-8 character) let the answer
// overshoot its limit; the head's /tokenize counts them.
func TestContinuationLimitCountsTokensNotChunks(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.setMode("cut")
	a.pairs, a.tokens = true, 20
	r.cutOnto(a, b, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", `,"max_tokens":10`, `[{"role":"user","content":"hi"}]`)
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	var limits []any
	for _, body := range b.bodies {
		limits = append(limits, body["max_tokens"])
	}
	if d := cmp.Diff([]any{float64(6)}, limits); d != "" { // 2 chunks of 2 tokens sent before the cut
		t.Errorf("continuation max_tokens (-want +got):\n%s", d)
	}
}

// TestWhatDoesNotConstrainIsContinued: "grammar": "" and response_format
// {"type":"text"} turned continuation off.
func TestWhatDoesNotConstrainIsContinued(t *testing.T) {
	for _, extra := range []string{`,"grammar":""`, `,"response_format":{"type":"text"}`, `,"logprobs":false`, `,"json_schema":null`} {
		t.Run(extra, func(t *testing.T) {
			r := newRig(t, nil)
			a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
			a.setMode("cut")
			got := r.cutOnto(a, b, func() (answer, error) {
				return r.streamAnswer("/v1/chat/completions", extra, `[{"role":"user","content":"hi"}]`)
			})
			if got.errEvent != "" || !got.done {
				t.Errorf("answer %+v: want it continued", got)
			}
		})
	}
}

// TestPrefillOfPartsIsKept: a client's assistant prefill whose content is
// an array of parts was dropped from the continuation.
func TestPrefillOfPartsIsKept(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.setMode("cut")
	a.tokens = 5
	r.cutOnto(a, b, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", "",
			`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"Sure, "}]}]`)
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		t.Fatal("no continuation")
	}
	msgs, _ := json.Marshal(b.bodies[0]["messages"])
	if !strings.Contains(string(msgs), `"content":"Sure, `) {
		t.Errorf("continuation messages %s: want the prefill's text first", msgs)
	}
}

// TestCORSPreflight: a browser's preflight (OPTIONS) got 405; it is
// answered for the origins configured, and for no other.
func TestCORSPreflight(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CORSOrigins = []string{"https://chat.example.org"} })
	r.route(nil, newTestHead(t, "fast", "1", "qwen-a"))
	preflight := func(origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, r.srv.URL+"/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	ok := preflight("https://chat.example.org")
	if ok.StatusCode != http.StatusNoContent || ok.Header.Get("Access-Control-Allow-Origin") != "https://chat.example.org" ||
		ok.Header.Get("Access-Control-Allow-Headers") != "authorization,content-type" || !strings.Contains(ok.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("allowed origin: %d %v", ok.StatusCode, ok.Header)
	}
	other := preflight("https://evil.example.com")
	if other.StatusCode != http.StatusNoContent || other.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin: %d %v, want 204 without CORS headers", other.StatusCode, other.Header)
	}
	_, hdr, _ := r.postRaw("/v1/chat/completions", `{"model":"qwen-a","messages":[]}`, "Origin", "https://chat.example.org")
	if hdr.Get("Access-Control-Allow-Origin") != "https://chat.example.org" {
		t.Errorf("the answer to an allowed origin: %v", hdr)
	}
}

// TestBodiesInFlightAreBounded: there was no bound on the request bytes all
// clients hold at once; past max_body_bytes_in_flight a request is a 503
// busy at once.
func TestBodiesInFlightAreBounded(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxBodyBytes, c.MaxBodyBytesInFlight = 16<<10, 40<<10 })
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.setMode("block")
	r.route(nil, h)
	body := fmt.Sprintf(`{"model":"qwen-a","messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", 15<<10))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 { // 2 × ~15 KiB held by the head
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "two requests at the head", func() bool { return len(h.requests()) == 2 })
	code, hdr, got := r.postRaw("/v1/chat/completions", body)
	if code != http.StatusServiceUnavailable || !strings.Contains(got, "busy") || hdr.Get("Retry-After") == "" {
		t.Errorf("third: got %d %q, want 503 busy with Retry-After", code, got)
	}
	cancel()
	waitFor(t, "the bytes given back", func() bool { return r.s.bodyBytes.Load() == 0 })
}

// TestTierPrefixKeepsTheSeedsURLs: the site's clients call
// /reasoning/v1/chat/completions (nginx's per-tier URL); through the front
// door it was a 404 "unknown path".
func TestTierPrefixKeepsTheSeedsURLs(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["reasoning"]
		ft.Prefix = "/reasoning"
		c.Tiers["reasoning"] = ft
	})
	fast, big := newTestHead(t, "fast", "1", "qwen-a", "qwen-b"), newTestHead(t, "reasoning", "2", "OR1-Behemoth")
	r.route(nil, fast, big)
	for _, tc := range []struct {
		name, path, body string
		code             int
		tier             string
	}{
		{"its model", "/reasoning/v1/chat/completions", `{"model":"OR1-Behemoth","messages":[]}`, 200, "reasoning"},
		{"any name, as llama-server takes it", "/reasoning/v1/chat/completions", `{"model":"gpt-4","messages":[]}`, 200, "reasoning"},
		{"no model", "/reasoning/v1/chat/completions", `{"messages":[]}`, 200, "reasoning"},
		{"llama-server's own path", "/reasoning/completion", `{"prompt":"hi"}`, 200, "reasoning"},
		{"another tier's model", "/reasoning/v1/chat/completions", `{"model":"qwen-a","messages":[]}`, 400, "none"},
		{"the root routes by model", "/v1/chat/completions", `{"model":"qwen-b","messages":[]}`, 200, "fast"},
		{"not a prefix", "/reasoningx/v1/chat/completions", `{"model":"OR1-Behemoth","messages":[]}`, 404, "none"},
	} {
		code, hdr, got := r.postRaw(tc.path, tc.body)
		if code != tc.code || hdr.Get(TierHeader) != tc.tier {
			t.Errorf("%s: got %d from tier %q (%.200s), want %d from %q", tc.name, code, hdr.Get(TierHeader), got, tc.code, tc.tier)
		}
	}
	big.mu.Lock()
	if m := big.bodies[1]["model"]; m != "gpt-4" {
		t.Errorf("the body went on as %v, want the client's own name (the head answers any)", m)
	}
	big.mu.Unlock()
	resp, err := http.Get(r.srv.URL + "/reasoning/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Data []struct {
			ID   string `json:"id"`
			Tier string `json:"tier"`
		} `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if len(doc.Data) != 1 || doc.Data[0].ID != "OR1-Behemoth" || doc.Data[0].Tier != "reasoning" {
		t.Errorf("/reasoning/v1/models: %+v, want the tier's model alone", doc.Data)
	}
}
