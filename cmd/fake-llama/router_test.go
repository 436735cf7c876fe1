package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/health"
)

// startRouter starts a llama-server in router mode over a directory holding
// a.gguf and b.gguf, and returns its base URL.
func startRouter(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"b.gguf", "a.gguf", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, base := startHead(t, append([]string{"--models-dir", dir, "--metrics"}, args...)...)
	waitReady(t, base)
	return base
}

// routerStatus reads /v1/models as real router mode shapes it: data[] with
// id and status.value, and no single-model "models" list.
func routerStatus(t *testing.T, base string) map[string]string {
	t.Helper()
	_, body := get(t, base+"/v1/models")
	var l struct {
		Object string
		Models []any
		Data   []struct {
			ID     string
			Object string
			Status struct {
				Value string
				Args  []string
			}
		}
	}
	decodeJSON(t, body, &l)
	if l.Object != "list" || l.Models != nil {
		t.Fatalf("/v1/models = %s, want object list and no models[]", body)
	}
	got := map[string]string{}
	for _, m := range l.Data {
		got[m.ID] = m.Status.Value
	}
	return got
}

// Real router_validate_model (server-models.cpp): GET /metrics and /slots are
// proxied by ?model=, a POST by its body's "model"; none → 400 "model name is
// missing from the request", an unknown one → 400 "model 'X' not found".
func TestRouterNeedsModelName(t *testing.T) {
	base := startRouter(t, "--fake-tokens", "1")
	missing := `{"error":{"code":400,"message":"model name is missing from the request","type":"invalid_request_error"}}`
	notFound := `{"error":{"code":400,"message":"model 'zz' not found","type":"invalid_request_error"}}`
	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantBody                 string
	}{
		{name: "metrics without model", method: "GET", path: "/metrics", wantCode: 400, wantBody: missing},
		{name: "slots without model", method: "GET", path: "/slots", wantCode: 400, wantBody: missing},
		{name: "metrics of unknown model", method: "GET", path: "/metrics?model=zz", wantCode: 400, wantBody: notFound},
		{name: "chat without model", method: "POST", path: "/v1/chat/completions", body: `{"messages":[]}`,
			wantCode: 400, wantBody: missing},
		{name: "chat for unknown model", method: "POST", path: "/v1/chat/completions",
			body: `{"model":"zz","messages":[]}`, wantCode: 400, wantBody: notFound},
		{name: "chat for a model", method: "POST", path: "/v1/chat/completions",
			body: `{"model":"a","messages":[]}`, wantCode: 200},
		{name: "slots of a model", method: "GET", path: "/slots?model=a", wantCode: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tt.wantCode, b)
			}
			if tt.wantBody != "" && strings.TrimSpace(string(b)) != tt.wantBody {
				t.Errorf("body = %s, want %s", b, tt.wantBody)
			}
		})
	}
}

// Real router lists every model with status.value unloaded/loading/loaded;
// a model loads on first use, and beyond --models-max the least recently
// used one is unloaded.
func TestRouterModelStatus(t *testing.T) {
	base := startRouter(t, "--models-max", "1")
	if d := cmp.Diff(map[string]string{"a": "unloaded", "b": "unloaded"}, routerStatus(t, base)); d != "" {
		t.Fatalf("at start (-want +got):\n%s", d)
	}
	if code, body := get(t, base+"/slots?model=a"); code != 200 {
		t.Fatalf("/slots?model=a = %d %s", code, body)
	}
	if d := cmp.Diff(map[string]string{"a": "loaded", "b": "unloaded"}, routerStatus(t, base)); d != "" {
		t.Errorf("after a request for a (-want +got):\n%s", d)
	}
	if code, body := get(t, base+"/slots?model=b"); code != 200 {
		t.Fatalf("/slots?model=b = %d %s", code, body)
	}
	if d := cmp.Diff(map[string]string{"a": "unloaded", "b": "loaded"}, routerStatus(t, base)); d != "" {
		t.Errorf("after b with --models-max 1 (-want +got):\n%s", d)
	}
}

// A model whose load has not finished is listed as "loading".
func TestRouterModelLoading(t *testing.T) {
	base := startRouter(t, "--fake-load-time", "1h")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/slots?model=b", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	poll(t, "b loading", func() bool { return routerStatus(t, base)["b"] == "loading" })
	if got := routerStatus(t, base)["a"]; got != "unloaded" {
		t.Errorf("a = %q, want unloaded", got)
	}
}

// The project's health.InFlight sums per model over a router's loaded models
// (/metrics?model=NAME); the fake must serve what it reads.
func TestRouterInFlightAsHealthReadsIt(t *testing.T) {
	base := startRouter(t, "--fake-token-rate", "1", "--fake-tokens", "1000")
	n, err := health.InFlight(context.Background(), client, base)
	if err != nil || n != 0 {
		t.Fatalf("idle InFlight = %d, %v; want 0", n, err)
	}
	// no client timeout: the stream must stay open while InFlight is polled
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"b","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	poll(t, "one request in flight", func() bool {
		n, err := health.InFlight(context.Background(), client, base)
		return err == nil && n == 1
	})
}
