package front

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
