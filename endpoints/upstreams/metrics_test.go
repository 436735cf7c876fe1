package upstreams

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := &Metrics{}
	m.Record(Report{Time: t0, Tiers: []TierReport{{Tier: "fast", Servers: []string{"a", "b"}}}}, nil)
	m.Record(Report{}, ErrReloadFailed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, addr, m) }()
	t.Cleanup(func() { cancel(); <-done })
	var body string
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never served: %v", err)
		}
		<-tick.C
	}
	for _, want := range []string{
		"llm_upstreams_passes_total 2\n", "llm_upstreams_reload_failures_total 1\n", "llm_upstreams_pass_errors_total 1\n",
		`llm_upstreams_endpoints{tier="fast"} 2` + "\n", "llm_upstreams_last_good_apply_timestamp_seconds 1795262400\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestMetricsTextfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llm-upstreams.prom")
	m := &Metrics{}
	m.Record(Report{}, errors.New("x"))
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "llm_upstreams_pass_errors_total 1\n") {
		t.Errorf("textfile = %q, %v", b, err)
	}
}
