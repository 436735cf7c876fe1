package front

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// The tests run the front door in process (an httptest server) over heads
// that are small handlers copying what llama-server answers where the
// front door depends on it; the e2e tests (cmd/llm-upstreams) run it over
// the fake llama.cpp on the real cluster.

// testHead is a stand-in llama-server head: it lists models, answers
// chat completions whole or streamed, and misbehaves on request.
type testHead struct {
	t      testing.TB
	tier   string
	job    string
	models []string
	srv    *httptest.Server

	mu   sync.Mutex
	mode string   // "" answers; "503" answers llama-server's loading 503; "reset" closes the connection; "cut" streams 2 tokens then closes; "fail" streams 2 tokens then an error event; "errfield" and "errevent" the same as older llama-server sent it ("error:" field) and as "event: error"; "block" waits for the client to leave
	seen []string // each request's first message content, in arrival order
	// headers are the requests' headers, in arrival order.
	headers []http.Header
	// multiline sends each chunk's data over two data lines; pairs puts
	// two tokens in each chunk (llama-server holds a token that ends
	// inside a UTF-8 character back and sends it with the next).
	multiline, pairs bool
	// ids gives each /completion event its token's id (idBase+N for "tN ",
	// FACTS.md Q14) and tokens_predicted; with pairs, an event names only
	// its second token, as llama-server does after a held one.
	ids bool
	// bodies are the requests as received.
	bodies []map[string]any
	// echo: a continuation's first delta repeats the prefill (llama-server's
	// implicit prefill, FACTS.md Q8).
	echo bool
	// tokens is how many tokens an answer has (default 3); toolCall makes
	// its second one the start of a tool call.
	tokens   int
	toolCall bool
	// gate, if set, is received from before each streamed chunk after the first.
	gate      chan struct{}
	left      chan struct{} // closed by "block" (or a gated stream) when the client left
	leftOnce  sync.Once
	modelsDoc string // /v1/models answer; "" lists models in the OpenAI shape
	// extra, when set, answers a request first (it reports whether it did).
	extra func(w http.ResponseWriter, r *http.Request) bool
}

func newTestHead(t testing.TB, tier, job string, models ...string) *testHead {
	h := &testHead{t: t, tier: tier, job: job, models: models, left: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *testHead) addr() string { return strings.TrimPrefix(h.srv.URL, "http://") }

func (h *testHead) setMode(m string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = m
}

func (h *testHead) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

type chatReq struct {
	Model     string    `json:"model"`
	Stream    bool      `json:"stream"`
	MaxTokens int       `json:"max_tokens"`
	NPredict  int       `json:"n_predict"`
	Prompt    rawPrompt `json:"prompt"`
	Messages  []struct {
		Role    string      `json:"role"`
		Content textContent `json:"content"`
	} `json:"messages"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// textContent is a message's content as the head reads it: a string, or
// the text of an array of parts.
type textContent string

func (c *textContent) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = textContent(s)
		return nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	for _, p := range parts {
		s += p.Text
	}
	*c = textContent(s)
	return nil
}

func (h *testHead) serve(w http.ResponseWriter, r *http.Request) {
	if h.extra != nil && h.extra(w, r) {
		return
	}
	if r.URL.Path == "/v1/models" {
		h.mu.Lock()
		doc := h.modelsDoc
		h.mu.Unlock()
		if doc == "" {
			var data []map[string]any
			for _, m := range h.models {
				data = append(data, map[string]any{"id": m, "object": "model", "owned_by": "llamacpp"})
			}
			b, _ := json.Marshal(map[string]any{"object": "list", "data": data})
			doc = string(b)
		}
		io.WriteString(w, doc)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/tokenize" { // llama-server's: one token per word here
		var q struct {
			Content string `json:"content"`
		}
		_ = json.Unmarshal(raw, &q)
		toks := []int{}
		for range strings.Fields(q.Content) {
			toks = append(toks, len(toks))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks})
		return
	}
	var req chatReq
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	tag := ""
	if len(req.Messages) > 0 {
		tag = string(req.Messages[0].Content)
	}
	h.mu.Lock()
	h.seen = append(h.seen, tag)
	h.bodies = append(h.bodies, body)
	h.headers = append(h.headers, r.Header.Clone())
	mode, gate, echo, tokens := h.mode, h.gate, h.echo, h.tokens
	h.mu.Unlock()
	switch mode {
	case "503": // llama-server while loading (fact 16)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)
		return
	case "reset":
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		return
	case "block":
		<-r.Context().Done()
		h.leftOnce.Do(func() { close(h.left) })
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"from %s"},"finish_reason":"stop"}]}`, req.Model, h.job)
		return
	}
	h.stream(w, r, req, mode, gate, echo, tokens)
}

// idBase is the test head's id of its token "t0 ".
const idBase = 500

// rawPrompt is a /completion prompt: a string, or one prompt of token ids
// and strings (llama-server's mixed prompt, FACTS.md Q14); text is it as
// text, the test head's ids as their "tN " words.
type rawPrompt struct {
	raw  json.RawMessage
	text string
}

func (p *rawPrompt) UnmarshalJSON(b []byte) error {
	p.raw = append(json.RawMessage(nil), b...)
	if json.Unmarshal(b, &p.text) == nil {
		return nil
	}
	var parts []any
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	for _, e := range parts {
		switch e := e.(type) {
		case string:
			p.text += e
		case float64:
			p.text += fmt.Sprintf("t%d ", int(e)-idBase)
		}
	}
	return nil
}

// stream answers as llama-server streams (FACTS.md Q8): a role chunk, a
// chunk per token ("tN ", numbered on from a prefill's words, the first
// led by the prefill when echo is set), a finish chunk, a usage chunk when
// asked, [DONE]; /completion: content events and a closing stop event.
func (h *testHead) stream(w http.ResponseWriter, r *http.Request, req chatReq, mode string, gate chan struct{}, echo bool, tokens int) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	// llama-server serves /completions and /infill with /completion's handler (FACTS.md Q10).
	raw := r.URL.Path == "/completion" || r.URL.Path == "/completions" || r.URL.Path == "/infill"
	id := "c-" + h.job
	h.mu.Lock()
	multiline, pairs, ids := h.multiline, h.pairs, h.ids
	h.mu.Unlock()
	send := func(v any) {
		b, _ := json.Marshal(v)
		if i := strings.Index(string(b), `,"model"`); multiline && i > 0 {
			fmt.Fprintf(w, "data: %s\ndata: %s\n\n", b[:i], b[i:])
		} else {
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		fl.Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "created": 1000, "model": req.Model, "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	n := 3
	if tokens > 0 {
		n = tokens
	}
	finish := "stop"
	for _, limit := range []int{req.MaxTokens, req.NPredict} {
		if limit > 0 && limit <= n {
			n, finish = limit, "length"
		}
	}
	first, prefill, words := 0, "", 0
	if k := len(req.Messages); k > 0 && req.Messages[k-1].Role == "assistant" {
		prefill = string(req.Messages[k-1].Content)
		first = len(strings.Fields(prefill))
	}
	if raw {
		for _, w := range strings.Fields(req.Prompt.text) {
			if _, err := fmt.Sscanf(w, "t%d", new(int)); err == nil {
				first++
			}
		}
	}
	for _, m := range req.Messages {
		words += len(strings.Fields(string(m.Content)))
	}
	if !raw {
		send(chunk(map[string]any{"role": "assistant", "content": nil}, nil))
	}
	for i := 0; i < n; i++ {
		if i > 0 && gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				h.leftOnce.Do(func() { close(h.left) })
				return
			}
		}
		if mode == "cut" && i == 2 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		if mode == "fail" && i == 2 { // real llama-server's in-stream error, then the end
			send(map[string]any{"error": map[string]any{"code": 500, "message": "The model produced output that does not match the expected peg-native format", "type": "server_error"}})
			return
		}
		if (mode == "errfield" || mode == "errevent") && i == 2 {
			field := "error: "
			if mode == "errevent" {
				field = "event: error\ndata: "
			}
			fmt.Fprintf(w, "%s{\"code\":500,\"message\":\"the head failed\",\"type\":\"server_error\"}\n\n", field)
			fl.Flush()
			return
		}
		text := fmt.Sprintf("t%d ", first+i)
		if pairs {
			text = fmt.Sprintf("t%d t%d ", first+2*i, first+2*i+1)
		}
		if i == 0 && echo {
			text = prefill + text
		}
		if mode == "cut" && i == 1 && h.toolCall {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": "{\"ci"}}}}, nil))
			continue
		}
		if raw && ids {
			k := first + i
			if pairs {
				k = first + 2*i + 1
			}
			send(map[string]any{"content": text, "tokens": []int{idBase + k}, "stop": false, "tokens_predicted": k - first + 1})
		} else if raw {
			send(map[string]any{"content": text, "stop": false})
		} else {
			send(chunk(map[string]any{"content": text}, nil))
		}
	}
	if raw {
		send(map[string]any{"content": "", "stop": true, "model": req.Model, "tokens_predicted": n, "tokens_evaluated": len(strings.Fields(req.Prompt.text))})
		return
	}
	send(chunk(map[string]any{}, finish))
	if req.StreamOptions.IncludeUsage {
		u := chunk(nil, nil)
		u["choices"], u["usage"] = []any{}, map[string]int{"prompt_tokens": words, "completion_tokens": n, "total_tokens": words + n}
		send(u)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// rig is a front door in an httptest server, fed tables by hand.
type rig struct {
	t   testing.TB
	s   *Server
	srv *httptest.Server
	log *syncBuf
	// conns counts the client connections the front door accepted.
	conns atomic.Int64
	sent  *sendOrder
}

// sendOrder is the heads' transport, recording each request's first
// message in the order the front door hands requests to it.
type sendOrder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	tags []string
}

func (o *sendOrder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			var cr chatReq
			_ = json.NewDecoder(b).Decode(&cr)
			if len(cr.Messages) > 0 {
				o.mu.Lock()
				o.tags = append(o.tags, string(cr.Messages[0].Content))
				o.mu.Unlock()
			}
		}
	}
	return o.rt.RoundTrip(req)
}

func (o *sendOrder) order() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.tags...)
}

// testConfig is [front] with its defaults and the tiers fast and reasoning.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Tiers["fast"] = DefaultTier
	cfg.Tiers["reasoning"] = DefaultTier
	return cfg
}

// noHeadQueue keeps no request in a head's own queue (head_queue = -1),
// for tests of what waits in the front door once a head's slots are
// taken.
func noHeadQueue(c *Config) {
	for name, ft := range c.Tiers {
		ft.HeadQueue = -1
		c.Tiers[name] = ft
	}
}

func newRig(t testing.TB, edit func(*Config)) *rig {
	cfg := testConfig()
	if edit != nil {
		edit(&cfg)
	}
	r := &rig{t: t, log: &syncBuf{}}
	r.sent = &sendOrder{rt: headTransport(cfg.ConnectTimeout)}
	r.s = New(cfg, Options{AccessLog: r.log, Transport: r.sent})
	t.Cleanup(r.s.Close)
	r.srv = httptest.NewUnstartedServer(r.s)
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.conns.Add(1)
		}
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

// route feeds the front door a pass: heads routed (each its tier's, ready
// and live), views for the tiers down (a tier with heads is routed).
func (r *rig) route(down []tiers.TierView, heads ...*testHead) {
	now := time.Now()
	rep := tiers.Report{Time: now, Live: map[string][]endpoints.Server{}}
	routed := map[string]bool{}
	for _, h := range heads {
		addHead(&rep, h.tier, h.job, h.addr(), h.models, now)
		routed[h.tier] = true
	}
	for tier := range routed {
		rep.Views = append(rep.Views, tiers.TierView{Tier: tier, State: tiers.StateRouted, Reason: tiers.ReasonRouted})
	}
	rep.Views = append(rep.Views, down...)
	r.s.Update(rep)
}

// addHead adds to rep a ready, live head of tier (job's) at addr serving models.
func addHead(rep *tiers.Report, tier, job, addr string, models []string, now time.Time) {
	d := endpoints.Decision{Live: true, Why: endpoints.WhyReady, Entry: endpoints.Entry{
		File: endpoints.FileName(tier, job),
		Endpoint: endpoints.Endpoint{Schema: 2, Tier: tier, JobID: job, State: endpoints.StateReady,
			Models: models, Node: "node-" + job, LeaseExpires: now.Add(time.Hour)}}}
	rep.Decisions = append(rep.Decisions, d)
	rep.Live[tier] = append(rep.Live[tier], endpoints.Server{Addr: addr, File: d.File})
}

// post sends a chat request for model with tag as its message; hdr adds headers.
func (r *rig) post(c *http.Client, model, tag string, stream bool, hdr ...string) (*http.Response, error) {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, tag)
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = http.DefaultClient
	}
	return c.Do(req)
}

// do is post with the whole answer read.
func (r *rig) do(model, tag string, hdr ...string) (int, http.Header, string) {
	r.t.Helper()
	resp, err := r.post(nil, model, tag, false, hdr...)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// accessLog is the access log so far: every line of a request answered
// before the call (they are written off the answers' path).
func (r *rig) accessLog() string {
	r.s.access.Flush(5 * time.Second)
	return r.log.String()
}

// held is how many requests the front door holds for tier.
func (r *rig) held(tier string) int {
	for _, ts := range r.s.Status().Tiers {
		if ts.Tier == tier {
			return ts.Held
		}
	}
	return 0
}

// waitFor polls cond every 5 ms until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sseEvents reads a streamed answer's data lines until EOF or error.
func sseEvents(body io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out, sc.Err()
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
