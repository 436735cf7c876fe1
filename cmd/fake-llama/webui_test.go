package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The fake's web UI is where llama-server's is (FACTS.md Q11): a loading
// page with 503 while the model loads, then the page at / (gzipped when
// the browser accepts it, as llama-server's index.html.gz), and /props
// with the fields the page reads.
func TestWebUIAndProps(t *testing.T) {
	_, base := startHead(t, "--alias", "qwen-a", "-np", "2", "--fake-load-time", "1500ms")
	code, body := get(t, base+"/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "loading") {
		t.Errorf("/ while loading: %d %q, want 503 and the loading page", code, body)
	}
	waitReady(t, base)
	code, body = get(t, base+"/") // Go's client asks gzip and undoes it
	if code != http.StatusOK || !strings.Contains(body, `id="answer"`) {
		t.Errorf("/: %d %.80q", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("/ asked with gzip: %v", resp.Header)
	}
	code, body = get(t, base+"/props")
	var props struct {
		ModelPath  string `json:"model_path"`
		TotalSlots int    `json:"total_slots"`
	}
	decodeJSON(t, body, &props)
	if code != 200 || props.ModelPath != "qwen-a" || props.TotalSlots != 2 {
		t.Errorf("/props: %d %s", code, body)
	}
	if code, _ := get(t, base+"/no-such-file.js"); code != http.StatusNotFound {
		t.Errorf("an unknown file: %d, want 404", code)
	}
}
