package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/keeper"
	"slurm-llm/endpoints/promtest"
)

// keepTestConfig writes a keeper config with one tier, fast, and returns
// its path and state directory.
func keepTestConfig(t *testing.T) (string, string) {
	t.Helper()
	return keepConfigFile(t, "")
}

// keepConfigWith is keepTestConfig's path with top-level keys added.
func keepConfigWith(t *testing.T, top string) string {
	t.Helper()
	path, _ := keepConfigFile(t, top)
	return path
}

func keepConfigFile(t *testing.T, top string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	path := filepath.Join(dir, "keeper.toml")
	body := fmt.Sprintf("state_dir = %q\nscheduler_timeout = \"2s\"\n%s[tiers.fast]\nscript = \"/nonexistent/fast.sbatch\"\n", stateDir, top)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, stateDir
}

// withoutSlurm empties PATH, so squeue, sbatch and scancel cannot run: the
// keeper sees an unavailable controller.
func withoutSlurm(t *testing.T) { t.Setenv("PATH", t.TempDir()) }

func TestKeepUsage(t *testing.T) {
	cfg, _ := keepTestConfig(t)
	tests := []struct {
		name string
		run  func([]string, io.Writer, io.Writer) int
		args []string
	}{
		{"keep: once and interval", runKeep, []string{"--once", "--interval", "1s", "--config", cfg}},
		{"keep: stray argument", runKeep, []string{"now", "--config", cfg}},
		{"keep: bad log format", runKeep, []string{"--once", "--log-format", "xml", "--config", cfg}},
		{"keep: bad log level", runKeep, []string{"--once", "--log-level", "loud", "--config", cfg}},
		{"keep status: stray argument", runKeep, []string{"status", "x", "--config", cfg}},
		{"tier: no verb", runTier, []string{"--config", cfg}},
		{"tier: unknown verb", runTier, []string{"pause", "fast", "--config", cfg}},
		{"tier: no name", runTier, []string{"disable", "--config", cfg}},
		{"tier: --cancel on enable", runTier, []string{"enable", "fast", "--cancel", "--config", cfg}},
		{"tier: unknown tier", runTier, []string{"disable", "slow", "--config", cfg}},
		{"keep: not the submit_as account", runKeep, []string{"--once", "--config", keepConfigWith(t, fmt.Sprintf("submit_as = \"%d\"\n", os.Getuid()+1))}},
		{"config missing", runKeep, []string{"--once", "--config", filepath.Join(t.TempDir(), "none.toml")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := tt.run(tt.args, &stdout, &stderr); code != keepExitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, keepExitUsage, stderr.String())
			}
		})
	}
}

func TestKeepConfigErrorNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keeper.toml")
	if err := os.WriteFile(path, []byte("state_dir = \"/k\"\n[tiers.fast]\nscript = \"/s\"\nbackof = \"1m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := runKeep([]string{"--once", "--config", path}, &bytes.Buffer{}, &stderr); code != keepExitUsage {
		t.Errorf("exit %d, want %d", code, keepExitUsage)
	}
	if want := path + ":4: tiers.fast.backof: unknown key"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not name %q", stderr.String(), want)
	}
}

// With the controller unreachable a pass fails (exit 1) and submits
// nothing; disable still works and status says unknown.
func TestKeepWithoutScheduler(t *testing.T) {
	cfg, stateDir := keepConfigFile(t, fmt.Sprintf("submit_as = \"%d\"\n", os.Getuid()))
	withoutSlurm(t)
	var stdout, stderr bytes.Buffer
	if code := runKeep([]string{"--once", "--config", cfg, "--log-format", "json"}, &stdout, &stderr); code != keepExitFailed {
		t.Errorf("keep --once: exit %d, want %d; stderr:\n%s", code, keepExitFailed, stderr.String())
	}
	st, err := keeper.NewStore(stateDir).Load("fast")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastError == "" || len(st.Submits) != 0 {
		t.Errorf("state after a pass without Slurm: %+v; want an error and no submit", st)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(stderr.String(), "\n", 2)[0]), &line); err != nil {
		t.Errorf("--log-format json: first line is not JSON: %v", err)
	}

	stdout.Reset()
	if code := runTier([]string{"disable", "fast", "--config", cfg}, &stdout, &stderr); code != keepExitOK {
		t.Errorf("tier disable: exit %d; stderr:\n%s", code, stderr.String())
	}
	if d := cmp.Diff("tier fast disabled\n", stdout.String()); d != "" {
		t.Errorf("tier disable output (-want +got):\n%s", d)
	}
	if code := runTier([]string{"disable", "fast", "--cancel", "--config", cfg}, &stdout, &stderr); code != keepExitFailed {
		t.Errorf("tier disable --cancel without Slurm: exit %d, want %d", code, keepExitFailed)
	}

	stdout.Reset()
	if code := runKeep([]string{"status", "--json", "--config", cfg}, &stdout, &stderr); code != keepExitOK {
		t.Fatalf("keep status: exit %d; stderr:\n%s", code, stderr.String())
	}
	var rows []struct {
		Tier, Next string
		Enabled    bool
	}
	if err := json.Unmarshal(stdout.Bytes(), &rows); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout.String())
	}
	if len(rows) != 1 || rows[0].Tier != "fast" || rows[0].Enabled || rows[0].Next != "unknown" {
		t.Errorf("status: %+v; want fast, disabled, next unknown", rows)
	}
}

// The loop runs passes until SIGINT, then exits 0.
func TestKeepLoopStopsOnSignal(t *testing.T) {
	cfg, stateDir := keepTestConfig(t)
	withoutSlurm(t)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() { done <- runKeep([]string{"--interval", "10ms", "--config", cfg}, &bytes.Buffer{}, &stderr) }()
	// The state file exists only after the first pass, so the signal
	// handler is in place before the signal is sent.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(stateDir, "fast.json")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pass within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling a file, not synchronising on time
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != keepExitOK {
			t.Errorf("exit %d after SIGINT, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("keep did not stop within 10s of SIGINT")
	}
}

// TestKeepServesMetrics runs the loop with [metrics] listen and scrapes
// it: the tier wanted, and the failed squeue calls counted (no Slurm).
func TestKeepServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the keeper listens there next; nothing else on loopback takes a port this test just freed
	cfg := keepConfigWith(t, fmt.Sprintf("[metrics]\nlisten = %q\n", addr))
	withoutSlurm(t)
	done := make(chan int, 1)
	go func() { done <- runKeep([]string{"--interval", "10ms", "--config", cfg}, &bytes.Buffer{}, io.Discard) }()
	defer func() {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("keep did not stop within 10s of SIGINT")
		}
	}()
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			got, err := promtest.Samples(body)
			if err != nil {
				t.Fatalf("not Prometheus text: %v\n%s", err, body)
			}
			if got[`llm_keeper_replicas{state="wanted",tier="fast"}`] == 1 && got["llm_keeper_scheduler_errors_total"] >= 1 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a server, not synchronising on time
	}
	t.Fatalf("no scrape within 10s showed the tier wanted and the scheduler errors; last:\n%s", body)
}
