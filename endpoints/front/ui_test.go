package front

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// uiHead is a test head that serves a page naming its tier, /props and a
// /slots whose slots carry a prompt.
func uiHead(t *testing.T, tier, job string, models ...string) *testHead {
	h := &testHead{t: t, tier: tier, job: job, models: models, left: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("ETag", `"`+tier+`"`)
			io.WriteString(w, "<html>page of "+tier+"</html>")
		case "/props":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model_path":"`+models[0]+`","total_slots":2}`)
		case "/slots":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `[{"id":0,"n_ctx":4096,"is_processing":true,"prompt":"alice's secret","next_token":[{"n_decoded":3}]},{"id":1,"n_ctx":4096,"is_processing":false}]`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// TestWebUIThroughTheFrontDoor (issue 37): a browser at the front door's
// root URL gets llama-server's chat page from the UI tier's head (the
// first tier by name unless [front] ui_tier says), under a tier's prefix
// that tier's; /props from the same head; /slots without what another
// user's slot holds; a prefix without its slash is redirected; with no
// head an HTML page of the front door's own (503, reloading), never an
// API error.
func TestWebUIThroughTheFrontDoor(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["reasoning"]
		ft.Prefix = "/reasoning"
		c.Tiers["reasoning"] = ft
	})
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	code, hdr, body := get("/")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") ||
		hdr.Get("Retry-After") == "" || hdr.Get("Cache-Control") != "no-store" {
		t.Errorf("/ with no head: %d %v %q; want the front door's 503 page, not cached", code, hdr, body)
	}
	r.route(nil, uiHead(t, "fast", "1", "qwen-a"), uiHead(t, "reasoning", "2", "OR1-Behemoth"))
	for _, tc := range []struct{ path, want, tier string }{
		{"/", "page of fast", "fast"},
		{"/index.html", "", "fast"},
		{"/reasoning/", "page of reasoning", "reasoning"},
		{"/props", `"model_path":"qwen-a"`, "fast"},
		{"/reasoning/props", `"model_path":"OR1-Behemoth"`, "reasoning"},
	} {
		code, hdr, body := get(tc.path)
		if tc.path == "/index.html" { // the test head serves / only: its 404 passed on
			if code != http.StatusNotFound || hdr.Get(TierHeader) != "fast" {
				t.Errorf("%s: %d from %q", tc.path, code, hdr.Get(TierHeader))
			}
			continue
		}
		if code != 200 || !strings.Contains(body, tc.want) || hdr.Get(TierHeader) != tc.tier {
			t.Errorf("%s: %d %q from tier %q; want %q from %s", tc.path, code, body, hdr.Get(TierHeader), tc.want, tc.tier)
		}
		if tc.path == "/" && hdr.Get("ETag") != `"fast"` {
			t.Errorf("/: the head's ETag was not passed on: %v", hdr)
		}
	}
	code, _, body = get("/slots")
	if code != 200 || strings.Contains(body, "secret") || strings.Contains(body, "next_token") || !strings.Contains(body, `"is_processing":true`) {
		t.Errorf("/slots: %d %s; want the slots without their prompts", code, body)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(r.srv.URL + "/reasoning")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/reasoning/" {
		t.Errorf("/reasoning: %d to %q, want 301 to /reasoning/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// With [front] ui_tier, the root URL is that tier's page.
	cfg := *r.s.cfg.Load()
	cfg.UITier = "reasoning"
	r.s.cfg.Store(&cfg)
	if _, hdr, body := get("/"); !strings.Contains(body, "page of reasoning") || hdr.Get(TierHeader) != "reasoning" {
		t.Errorf("/ with ui_tier reasoning: %q from %q", body, hdr.Get(TierHeader))
	}
	// The UI tier away: the page comes from any routed head.
	r.route(nil, uiHead(t, "fast", "3", "qwen-a"))
	if code, hdr, body := get("/"); code != 200 || !strings.Contains(body, "page of fast") {
		t.Errorf("/ with the UI tier away: %d %q from %q; want another tier's page", code, body, hdr.Get(TierHeader))
	}
}

// TestUIPathsOfRealBuilds: /tools and /cors-proxy, which run something
// on the head, are refused as a head with them off refuses them, and the
// resumable streams are answered as a head with none (which paths are the
// UI's: webui's TestPathsOfRealBuilds).
func TestUIPathsOfRealBuilds(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "1", "qwen-a")
	r.route(nil, h)
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(m, r.srv.URL+"/tools", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), `"feature_disabled"`) {
			t.Errorf("%s /tools: %d %s; want 403 feature_disabled", m, resp.StatusCode, b)
		}
	}
	if got := h.requests(); len(got) != 0 {
		t.Errorf("the head was asked %v; /tools must not reach it", got)
	}
	// Resumable streams: none through the front door (it continues cut
	// streams itself), answered as a head with no session for the caller.
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{{http.MethodPost, "/v1/streams/lookup", 200, "[]"}, {http.MethodGet, "/v1/stream?conversation_id=a", 404, "not_found_error"}} {
		req, _ := http.NewRequest(c.method, r.srv.URL+c.path, strings.NewReader(`{"conversation_ids":["a"]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
			t.Errorf("%s %s: %d %s; want %d %s", c.method, c.path, resp.StatusCode, b, c.code, c.body)
		}
	}
}

// TestRootPageIsARouter (issue 37): the page at the root URL reaches every
// tier's model, as llama-server's own UI does with its router: /props at
// the root says "role": "router" (the rest as the UI tier's head gave it),
// /props?model= is answered by a head of that model's tier, /v1/models
// says each routed model is loaded, /models/sse is held open (200, an
// event stream) until the page leaves or the front door stops its feeds;
// under a tier's prefix the page is that tier's, its /props untouched.
func TestRootPageIsARouter(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["reasoning"]
		ft.Prefix = "/reasoning"
		c.Tiers["reasoning"] = ft
	})
	r.route(nil, uiHead(t, "fast", "1", "qwen-a"), uiHead(t, "reasoning", "2", "OR1-Behemoth"))
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, tc := range []struct{ path, want, not, tier string }{
		{"/props", `"role":"router"`, "", "fast"},
		{"/props?model=OR1-Behemoth&autoload=false", `"model_path":"OR1-Behemoth"`, `"router"`, "reasoning"},
		{"/props?model=qwen-a", `"model_path":"qwen-a"`, `"router"`, "fast"},
		{"/reasoning/props", `"model_path":"OR1-Behemoth"`, `"router"`, "reasoning"},
	} {
		code, hdr, body := get(tc.path)
		if code != 200 || !strings.Contains(body, tc.want) || tc.not != "" && strings.Contains(body, tc.not) || hdr.Get(TierHeader) != tc.tier {
			t.Errorf("%s: %d %s from %q; want %s from %s", tc.path, code, body, hdr.Get(TierHeader), tc.want, tc.tier)
		}
	}
	if _, _, body := get("/props"); !strings.Contains(body, `"model_path":"qwen-a"`) || !strings.Contains(body, `"total_slots":2`) {
		t.Errorf("/props at the root lost the head's fields: %s", body)
	}
	if _, _, body := get("/v1/models"); strings.Count(body, `"status":{"value":"loaded"}`) != 2 {
		t.Errorf("/v1/models: %s; want both models loaded", body)
	}
	resp, err := http.Get(r.srv.URL + "/models/sse")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("/models/sse: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()
	r.s.StopFeeds()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the feed ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the feed was still open 10 s after StopFeeds")
	}
	resp.Body.Close()
}
