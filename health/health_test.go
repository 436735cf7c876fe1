package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serve starts an httptest server answering each path with a fixed status and body.
func serve(t *testing.T, routes map[string]response) string {
	t.Helper()
	mux := http.NewServeMux()
	for path, r := range routes {
		r := r
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(r.status)
			_, _ = w.Write([]byte(r.body))
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

type response struct {
	status int
	body   string
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		want    Status
		wantErr bool
	}{
		{name: "ready", status: 200, want: StatusReady},
		{name: "loading", status: 503, want: StatusLoading},
		{name: "server error", status: 500, want: StatusUnknown, wantErr: true},
		{name: "not found", status: 404, want: StatusUnknown, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := serve(t, map[string]response{"/health": {status: tt.status, body: `{"status":"x"}`}})
			got, err := Check(ctx(t), http.DefaultClient, url)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Check error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrStatus) {
				t.Errorf("Check error %v does not wrap ErrStatus", err)
			}
			if got != tt.want {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckNoServer(t *testing.T) {
	addr := closedAddr(t)
	if _, err := Check(ctx(t), http.DefaultClient, "http://"+addr); err == nil {
		t.Fatal("Check of a closed port: no error")
	}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := Probe(ctx(t), l.Addr().String()); err != nil {
		t.Errorf("Probe of a listening port: %v", err)
	}
	if err := Probe(ctx(t), closedAddr(t)); err == nil {
		t.Error("Probe of a closed port: no error")
	}
}

func TestModels(t *testing.T) {
	tests := []struct {
		name    string
		resp    response
		want    []string
		wantErr bool
	}{
		{name: "openai shape", resp: response{200, `{"object":"list","data":[{"id":"qwen-7b"},{"id":"llama-3"}]}`},
			want: []string{"llama-3", "qwen-7b"}},
		{name: "both shapes deduplicated", resp: response{200, `{"models":[{"name":"m1","model":"m1"}],"data":[{"id":"m1"}]}`},
			want: []string{"m1"}},
		{name: "model field when name empty", resp: response{200, `{"models":[{"model":"m2"}]}`},
			want: []string{"m2"}},
		{name: "empty list", resp: response{200, `{"data":[]}`}, want: nil},
		{name: "loading", resp: response{503, `{}`}, wantErr: true},
		{name: "not json", resp: response{200, `<html>`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := serve(t, map[string]response{"/v1/models": tt.resp})
			got, err := Models(ctx(t), http.DefaultClient, url)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Models error = %v, want error %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Models (-want +got):\n%s", d)
			}
		})
	}
}

func TestInFlight(t *testing.T) {
	const metrics = "# HELP llamacpp:requests_processing Number of requests processing.\n" +
		"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n" +
		"llamacpp:requests_deferred 1\nllamacpp:prompt_tokens_total 500\n"
	tests := []struct {
		name    string
		routes  map[string]response
		want    int
		wantErr bool
	}{
		{name: "metrics", routes: map[string]response{"/metrics": {200, metrics}}, want: 3},
		{name: "metrics idle", routes: map[string]response{"/metrics": {200, "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"}}, want: 0},
		{name: "metrics off, slots", routes: map[string]response{
			"/metrics": {501, `{"error":"metrics disabled"}`},
			"/slots":   {200, `[{"id":0,"is_processing":true},{"id":1,"is_processing":false},{"id":2,"is_processing":true}]`},
		}, want: 2},
		{name: "metrics without gauges, slots", routes: map[string]response{
			"/metrics": {200, "other_metric 4\n"},
			"/slots":   {200, `[{"id":0,"is_processing":false}]`},
		}, want: 0},
		{name: "bad gauge value", routes: map[string]response{"/metrics": {200, "llamacpp:requests_processing NaN\n"}}, wantErr: true},
		{name: "gauge without value", routes: map[string]response{"/metrics": {200, "llamacpp:requests_processing \n"}}, wantErr: true},
		{name: "nothing", routes: map[string]response{}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InFlight(ctx(t), http.DefaultClient, serve(t, tt.routes))
			if (err != nil) != tt.wantErr {
				t.Fatalf("InFlight error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("InFlight = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBaseURL(t *testing.T) {
	tests := []struct {
		name string
		host string
		port int
		want string
	}{
		{name: "ipv4", host: "10.0.0.1", port: 8080, want: "http://10.0.0.1:8080"},
		{name: "ipv6", host: "::1", port: 80, want: "http://[::1]:80"},
		{name: "bracketed ipv6", host: "[::1]", port: 80, want: "http://[::1]:80"},
		{name: "name", host: "node1", port: 9000, want: "http://node1:9000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BaseURL(tt.host, tt.port); got != tt.want {
				t.Errorf("BaseURL = %q, want %q", got, tt.want)
			}
		})
	}
}

// serveRouter starts a server shaped like llama-server in router mode
// (--models-dir): /metrics and /slots answer 400 without ?model=, each
// model's own /metrics answers with its gauges, and /v1/models lists the
// models with their status.
func serveRouter(t *testing.T, models string, perModel map[string]string) string {
	t.Helper()
	mux := http.NewServeMux()
	missing := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("model") != "" {
			return false
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":400,"message":"model name is missing from the request"}}`))
		return true
	}
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if missing(w, r) {
			return
		}
		body, ok := perModel[r.URL.Query().Get("model")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(body))
	})
	mux.HandleFunc("/slots", func(w http.ResponseWriter, r *http.Request) { missing(w, r) })
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(models)) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestInFlightRouter(t *testing.T) {
	busy := "llamacpp:requests_processing 1\nllamacpp:requests_deferred 1\n"
	idle := "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
	tests := []struct {
		name     string
		models   string
		perModel map[string]string
		want     int
		wantErr  bool
	}{
		{name: "two loaded models, one busy",
			models:   `{"object":"list","data":[{"id":"a","status":{"value":"loaded"}},{"id":"b","status":{"value":"loaded"}},{"id":"c","status":{"value":"unloaded"}}]}`,
			perModel: map[string]string{"a": busy, "b": idle}, want: 2},
		{name: "nothing loaded",
			models: `{"object":"list","data":[{"id":"a","status":{"value":"unloaded"}}]}`, want: 0},
		{name: "a model loading counts as busy",
			models:   `{"object":"list","data":[{"id":"a","status":{"value":"loading"}},{"id":"b","status":{"value":"loaded"}}]}`,
			perModel: map[string]string{"b": idle}, want: 1},
		{name: "a loaded model's metrics fail",
			models: `{"object":"list","data":[{"id":"a","status":{"value":"loaded"}}]}`, wantErr: true},
		{name: "not a router: no status in the list",
			models: `{"object":"list","data":[{"id":"a"}]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InFlight(ctx(t), http.DefaultClient, serveRouter(t, tt.models, tt.perModel))
			if (err != nil) != tt.wantErr {
				t.Fatalf("InFlight error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("InFlight = %d, want %d", got, tt.want)
			}
		})
	}
}
