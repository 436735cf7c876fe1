package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// The fake's own misbehave flags, which the supervisor's tests use to provoke failures.
func TestFailStartAndExitAfter(t *testing.T) {
	tests := []struct {
		name    string
		mode    string
		args    []string
		wantLog string
	}{
		{name: "server fail start", mode: "server", args: []string{"--port", "0", "--fake-fail-start"},
			wantLog: `--fake-fail-start`},
		{name: "rpc fail start", mode: "rpc-server", args: []string{"-p", "0", "--fake-fail-start"},
			wantLog: `--fake-fail-start`},
		{name: "server exit after", mode: "server", args: []string{"--port", "0", "--fake-exit-after", "100ms"},
			wantLog: `--fake-exit-after`},
		{name: "rpc exit after", mode: "rpc-server", args: []string{"-p", "0", "--fake-exit-after", "100ms"},
			wantLog: `--fake-exit-after`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, tt.mode, tt.args...)
			if code := p.waitExit(t); code != 1 {
				t.Errorf("exit = %d, want 1", code)
			}
			p.waitLog(t, tt.wantLog)
		})
	}
}

// --fake-hang-health: /health never answers, while the rest of the API does.
func TestHangHealth(t *testing.T) {
	_, base := startHead(t, "--fake-hang-health")
	poll(t, "models answered", func() bool {
		code, _ := get(t, base+"/v1/models")
		return code == http.StatusOK
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("health answered %d, want no answer", resp.StatusCode)
	}
}

// --fake-startup-delay: the process listens only after the delay.
func TestStartupDelay(t *testing.T) {
	tests := []struct {
		name  string
		start func(t testing.TB, args ...string) (*proc, string)
	}{
		{name: "rpc-server", start: startWorker},
		{name: "server", start: startHead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			began := time.Now()
			p, _ := tt.start(t, "--fake-startup-delay", "300ms")
			if took := time.Since(began); took < 300*time.Millisecond {
				t.Errorf("listening after %v, want at least 300ms", took)
			}
			if p.exited() {
				t.Errorf("process exited")
			}
		})
	}
}

// --fake-ignore-sigterm on a worker: SIGTERM does not end it; without it, SIGTERM kills it
// like the real rpc-server, which installs no handler.
func TestRPCSIGTERM(t *testing.T) {
	w, _ := startWorker(t)
	w.signal(t, syscall.SIGTERM)
	if sig := w.killedBy(t); sig != syscall.SIGTERM {
		t.Errorf("worker ended by signal %d, want SIGTERM", sig)
	}
	stubborn, addr := startWorker(t, "--fake-ignore-sigterm")
	stubborn.signal(t, syscall.SIGTERM)
	stubborn.waitLog(t, `ignoring terminated`)
	c := dialRPC(t, addr)
	if reply, err := c.call("HELLO "+defaultRPCVersion, waitTimeout); err != nil || reply != "OK "+defaultRPCVersion {
		t.Errorf("worker after ignored SIGTERM: HELLO = %q, %v", reply, err)
	}
	if stubborn.exited() {
		t.Errorf("worker with --fake-ignore-sigterm exited on SIGTERM")
	}
}

// A symlink named like a llama.cpp binary picks the mode, so configs run unchanged.
func TestArgv0SelectsMode(t *testing.T) {
	tests := []struct {
		name    string
		bin     string
		args    []string
		wantLog string
	}{
		{name: "ggml-rpc-server", bin: "ggml-rpc-server", args: []string{"-p", "0"},
			wantLog: `fake-llama: listening on `},
		{name: "rpc-server", bin: "rpc-server", args: []string{"-H", "127.0.0.1", "-p", "0"},
			wantLog: `fake-llama: listening on `},
		{name: "llama-server", bin: "llama-server",
			args:    []string{"--port", "0", "-m", "x.gguf", "-ngl", "99", "--mlock"},
			wantLog: `fake-llama: listening on `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startBin(t, tt.bin, tt.args...)
			p.waitLog(t, tt.wantLog)
		})
	}
}

// --fake-metrics-delay: /metrics answers late, the rest of the API at once.
func TestMetricsDelay(t *testing.T) {
	_, base := startHead(t, "--metrics", "--fake-metrics-delay", "5s")
	poll(t, "models answered", func() bool {
		code, _ := get(t, base+"/v1/models")
		return code == http.StatusOK
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("/metrics answered %d at once, want it late", resp.StatusCode)
	}
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Errorf("/health = %d, want 200 at once", code)
	}
}
