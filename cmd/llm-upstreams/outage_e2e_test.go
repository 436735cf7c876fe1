//go:build e2e

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/slurm/slurmtest"
)

// deadSqueue puts first on PATH a squeue that runs the real one against
// a controller port nobody listens on (the local cluster's slurm.conf with
// SlurmctldPort=9), and logs the time of each call to the returned file.
// It skips without root, Slurm's clients or the cluster's slurm.conf (slurmtest.SlurmConfPath).
func deadSqueue(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root and Slurm's clients")
	}
	real, err := exec.LookPath("squeue")
	if err != nil {
		t.Skip("squeue not installed")
	}
	conf, err := os.ReadFile(slurmtest.SlurmConfPath())
	if err != nil {
		t.Skipf("no slurm.conf (scripts/slurm-cluster.sh up): %v", err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(bad, append(conf, []byte("\nSlurmctldPort=9\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	script := fmt.Sprintf("#!/bin/sh\ndate +%%s.%%N >>%s\nSLURM_CONF=%s exec %s \"$@\"\n", calls, bad, real)
	if err := os.WriteFile(filepath.Join(dir, "squeue"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return calls
}

// callTimes reads the squeue call log.
func callTimes(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []float64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// With slurmctld unreachable (real squeue, a dead port), watch keeps its
// entry (unverified), backs its squeue calls off, and never holds the
// lock while squeue waits: the timer's sync gets the lock at once.
func TestE2EOutageSyncNotStarved(t *testing.T) {
	calls := deadSqueue(t)
	root := t.TempDir()
	epDir, out := filepath.Join(root, "endpoints"), filepath.Join(root, "out")
	for _, d := range []string{epDir, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: "4242", Host: "127.0.0.1", Port: 9,
		State: endpoints.StateReady, Node: "node1", PID: 1, StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(epDir, e); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("endpoint_dir = %q\noutput_dir = %q\nlock_file = %q\nlock_timeout = \"1s\"\nsweep_interval = \"50ms\"\n%s"+
		"[nginx]\ntest = [\"true\"]\nreload = [\"true\"]\n[tiers.fast]\n", epDir, out, filepath.Join(root, "lock"), anyOwnerAnyNetwork)
	watchConf, syncConf := filepath.Join(root, "watch.toml"), filepath.Join(root, "sync.toml")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(watchConf, base+"[scheduler]\ntimeout = \"2s\"\nmax_age = \"1s\"\nbackoff_max = \"4s\"\n")
	write(syncConf, base+"[scheduler]\ncheck = false\n") // the lock alone is measured

	start := time.Now()
	code := make(chan int, 1)
	go func() { code <- run([]string{"watch", "--config", watchConf}, io.Discard, &faketest.Buffer{}) }()
	var syncs []time.Duration
	pace := time.NewTicker(100 * time.Millisecond) // a sync every 0.1 s: a busy timer
	defer pace.Stop()
	for ; time.Since(start) < 10*time.Second; <-pace.C {
		var errb bytes.Buffer
		s := time.Now()
		if c := run([]string{"sync", "--config", syncConf}, io.Discard, &errb); c != exitOK {
			t.Fatalf("sync during the outage: exit %d\n%s", c, errb.String())
		}
		syncs = append(syncs, time.Since(s))
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if c := <-code; c != exitOK {
		t.Errorf("watch exit %d", c)
	}
	times := callTimes(t, calls)
	var rel []string
	for _, c := range times {
		rel = append(rel, fmt.Sprintf("%.1fs", c-float64(start.UnixNano())/1e9))
	}
	var longest time.Duration
	for _, d := range syncs {
		longest = max(longest, d)
	}
	t.Logf("%d syncs during the outage, the longest %v; watch's squeue calls at %v", len(syncs), longest, rel)
	// Timeout 2 s, then retries after 1 s, 2 s, 4 s: calls at about 0, 3, 7 s
	// in 10 s; back to back (the old way) would be 5.
	if len(times) > 4 {
		t.Errorf("%d squeue calls in 10 s of outage, want at most 4 (backoff)", len(times))
	}
}

// Regression (issue 21): with slurmctld unreachable every sync took two
// squeue timeouts (~19 s with squeue's own retries): the tier questions,
// then the check of the ready file's job. One call now serves the pass.
func TestE2EOutageSyncAsksOnce(t *testing.T) {
	calls := deadSqueue(t)
	root := t.TempDir()
	epDir, out := filepath.Join(root, "endpoints"), filepath.Join(root, "out")
	for _, d := range []string{epDir, out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: "4243", Host: "127.0.0.1", Port: 9,
		State: endpoints.StateReady, Node: "node1", PID: 1, StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(epDir, e); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(root, "sync.toml")
	text := fmt.Sprintf("endpoint_dir = %q\noutput_dir = %q\nlock_file = %q\nkeeper_config = \"\"\n%s"+
		"[nginx]\ntest = [\"true\"]\nreload = [\"true\"]\n[tiers.fast]\n",
		epDir, out, filepath.Join(root, "lock"), anyOwnerAnyNetwork)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var errb bytes.Buffer
	if c := run([]string{"sync", "--config", conf}, io.Discard, &errb); c != exitOK {
		t.Fatalf("sync in the outage: exit %d\n%s", c, errb.String())
	}
	took := time.Since(start)
	n := len(callTimes(t, calls))
	t.Logf("sync in an outage: %d squeue call(s), %.1f s", n, took.Seconds())
	if n != 1 {
		t.Errorf("%d squeue calls in one sync pass during an outage, want 1", n)
	}
}
