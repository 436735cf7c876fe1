package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type slotView struct {
	ID           int  `json:"id"`
	IsProcessing bool `json:"is_processing"`
}

func slots(t *testing.T, base string) []slotView {
	t.Helper()
	_, body := get(t, base+"/slots")
	var s []slotView
	decodeJSON(t, body, &s)
	return s
}

// Fact 16: in-flight work shows in /metrics (requests_processing, requests_deferred) and
// /slots (is_processing); a request beyond the free slots is deferred.
func TestMetricsAndSlotsShowInFlight(t *testing.T) {
	_, base := startHead(t, "--metrics", "--parallel", "1", "--fake-tokens", "100000",
		"--fake-token-rate", "20")
	waitReady(t, base)
	if p, d := metric(t, base, "requests_processing"), metric(t, base, "requests_deferred"); p != 0 || d != 0 {
		t.Fatalf("idle: processing %d deferred %d, want 0 0", p, d)
	}
	resp, _ := startStream(t, base)
	if p := metric(t, base, "requests_processing"); p != 1 {
		t.Errorf("requests_processing with a stream = %d, want 1", p)
	}
	want := []slotView{{ID: 0, IsProcessing: true}}
	if d := cmp.Diff(want, slots(t, base)); d != "" {
		t.Errorf("slots with a stream (-want +got):\n%s", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"messages":[]}`))
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}()
	poll(t, "second request deferred", func() bool { return metric(t, base, "requests_deferred") == 1 })
	cancel()
	resp.Body.Close()
	poll(t, "back to idle", func() bool {
		return metric(t, base, "requests_processing") == 0 && metric(t, base, "requests_deferred") == 0
	})
	if d := cmp.Diff([]slotView{{ID: 0}}, slots(t, base)); d != "" {
		t.Errorf("slots when idle (-want +got):\n%s", d)
	}
}

// Without --metrics, /metrics answers 501 like the real server.
func TestMetricsNeedFlag(t *testing.T) {
	_, base := startHead(t)
	waitReady(t, base)
	if code, _ := get(t, base+"/metrics"); code != http.StatusNotImplemented {
		t.Errorf("/metrics without --metrics = %d, want 501", code)
	}
}
