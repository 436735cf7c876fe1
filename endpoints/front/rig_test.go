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
	"slurm-llm/endpoints/upstreams"
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
	mode string   // "" answers; "503" answers llama-server's loading 503; "reset" closes the connection; "cut" streams 2 chunks then closes; "block" waits for the client to leave
	seen []string // each request's first message content, in arrival order
	// gate, if set, is received from before each streamed chunk after the first.
	gate      chan struct{}
	left      chan struct{} // closed by "block" when the client left
	modelsDoc string        // /v1/models answer; "" lists models in the OpenAI shape
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
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

func (h *testHead) serve(w http.ResponseWriter, r *http.Request) {
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
	var req chatReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tag := ""
	if len(req.Messages) > 0 {
		tag = req.Messages[0].Content
	}
	h.mu.Lock()
	h.seen = append(h.seen, tag)
	mode, gate := h.mode, h.gate
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
		close(h.left)
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"from %s"},"finish_reason":"stop"}]}`, req.Model, h.job)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := 0; i < 3; i++ {
		if i > 0 && gate != nil {
			<-gate
		}
		if mode == "cut" && i == 2 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", req.Model, i)
		fl.Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", req.Model)
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
				o.tags = append(o.tags, cr.Messages[0].Content)
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

func newRig(t testing.TB, edit func(*upstreams.FrontConfig)) *rig {
	cfg := upstreams.DefaultFrontConfig()
	cfg.Tiers["fast"] = upstreams.DefaultFrontTier
	cfg.Tiers["reasoning"] = upstreams.DefaultFrontTier
	if edit != nil {
		edit(&cfg)
	}
	r := &rig{t: t, log: &syncBuf{}}
	r.sent = &sendOrder{rt: headTransport(cfg.ConnectTimeout)}
	r.s = New(cfg, Options{AccessLog: r.log, Transport: r.sent})
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
func (r *rig) route(down []upstreams.TierView, heads ...*testHead) {
	now := time.Now()
	rep := upstreams.Report{Time: now, Live: map[string][]endpoints.Server{}}
	routed := map[string]bool{}
	for _, h := range heads {
		d := endpoints.Decision{Live: true, Why: endpoints.WhyReady, Entry: endpoints.Entry{
			File: endpoints.FileName(h.tier, h.job),
			Endpoint: endpoints.Endpoint{Schema: 2, Tier: h.tier, JobID: h.job, State: endpoints.StateReady,
				Models: h.models, Node: "node-" + h.job, LeaseExpires: now.Add(time.Hour)}}}
		rep.Decisions = append(rep.Decisions, d)
		rep.Live[h.tier] = append(rep.Live[h.tier], endpoints.Server{Addr: h.addr(), File: d.File})
		routed[h.tier] = true
	}
	for tier := range routed {
		rep.Views = append(rep.Views, upstreams.TierView{Tier: tier, State: upstreams.StateRouted, Reason: upstreams.ReasonRouted})
	}
	rep.Views = append(rep.Views, down...)
	r.s.Update(rep)
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
func waitFor(t *testing.T, what string, cond func() bool) {
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
