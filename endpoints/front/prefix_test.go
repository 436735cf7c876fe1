package front

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTierPrefixIsTakenOffThePathSentToTheHead: a request to
// /reasoning/v1/chat/completions reached the head as
// /reasoning/v1/chat/completions, a path llama-server (and the fake
// llama.cpp) answers 404, so the seed's URLs got the head's "404 page not
// found" through the front door (TestE2EFrontSeedURLs found it; the unit
// tests' heads answered any path). The head gets the path it serves.
func TestTierPrefixIsTakenOffThePathSentToTheHead(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["reasoning"]
		ft.Prefix = "/reasoning"
		c.Tiers["reasoning"] = ft
	})
	big := newTestHead(t, "reasoning", "2", "OR1-Behemoth")
	var mu sync.Mutex
	var paths []string
	big.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		paths = append(paths, req.URL.Path)
		mu.Unlock()
		big.serve(w, req)
	})
	r.route(nil, big)
	for _, tc := range []struct{ path, body string }{
		{"/reasoning/v1/chat/completions", `{"model":"OR1-Behemoth","messages":[]}`},
		{"/reasoning/v1/chat/completions", `{"model":"OR1-Behemoth","stream":true,"messages":[]}`},
		{"/reasoning/completion", `{"prompt":"hi"}`},
	} {
		if code, _, got := r.postRaw(tc.path, tc.body); code != http.StatusOK {
			t.Errorf("%s %s: got %d %.200q", tc.path, tc.body, code, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff([]string{"/v1/chat/completions", "/v1/chat/completions", "/completion"}, paths); d != "" {
		t.Errorf("the paths the head got (-want +got):\n%s", d)
	}
}
