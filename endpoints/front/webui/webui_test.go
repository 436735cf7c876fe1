package webui

import "testing"

// TestPathsOfRealBuilds: the files llama-server's UI build of 2026-08
// (3f545bec) asks at the root and under its directories are the UI's
// (FACTS.md Q11), whatever their names; the API paths are not, nor /tools
// and /cors-proxy (Refused: they run something on the head).
func TestPathsOfRealBuilds(t *testing.T) {
	for _, p := range []string{"/", "/index.html", "/props", "/slots", "/favicon.svg", "/favicon-dark.ico", "/build.json",
		"/sw.js", "/workbox-b3c04f83.js", "/manifest.webmanifest", "/pwa-192x192.png", "/apple-touch-icon-180x180.png",
		"/_app/version.json", "/_app/immutable/bundle.DPfxVu5o.js", "/recommended-mcp/exa.ico", "/assets/index-x.css"} {
		if !IsPath(p) {
			t.Errorf("IsPath(%q) = false, want the UI's", p)
		}
	}
	for _, p := range []string{"/v1/models", "/models", "/v1/chat/completions", "/completion", "/infill", "/tokenize",
		"/health", "/metrics", "/tools", "/cors-proxy", "/v1/x.json", "/.json", "/keys", "/reasoning"} {
		if IsPath(p) {
			t.Errorf("IsPath(%q) = true, want not the UI's", p)
		}
	}
	for _, p := range []string{"/tools", "/cors-proxy"} {
		if !Refused(p) {
			t.Errorf("Refused(%q) = false", p)
		}
	}
}
