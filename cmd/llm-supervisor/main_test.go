package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
)

func TestDispatchExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{name: "no command", args: nil, want: exitUsage},
		{name: "unknown command", args: []string{"frobnicate"}, want: exitUsage},
		{name: "version", args: []string{"--version"}, want: exitOK},
		{name: "run without config", args: []string{"run"}, want: exitUsage},
		{name: "run with a missing config", args: []string{"run", "--config", "/nonexistent.toml"}, want: exitUsage},
		{name: "run with a bad log format", args: []string{"run", "--config", "x.toml", "--log-format", "xml"}, want: exitUsage},
		{name: "status without a directory", args: []string{"status"}, want: exitUsage},
		{name: "status with both sources", args: []string{"status", "--endpoint-dir", "/tmp", "--config", "x"}, want: exitUsage},
		{name: "status of a missing directory", args: []string{"status", "--endpoint-dir", "/nonexistent-dir"}, want: exitSetup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := dispatch(tt.args, strings.NewReader(""), &out, &errOut); got != tt.want {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", got, tt.want, errOut.String())
			}
		})
	}
}

func TestVersionIsStamped(t *testing.T) {
	old := version
	version = "v9.9.9-test"
	defer func() { version = old }()
	var out bytes.Buffer
	dispatch([]string{"--version"}, nil, &out, &out)
	if got := out.String(); got != "llm-supervisor v9.9.9-test\n" {
		t.Errorf("--version printed %q", got)
	}
}

func TestStatusTable(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	ep := func(tier, job string, st endpoints.State, reason string, models []string) endpoints.Endpoint {
		return endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: tier, JobID: job, RestartCount: 1,
			Host: "10.0.0.1", Port: 8080, State: st, Reason: reason, Models: models, Node: "gpu01", PID: 10,
			StartedAt: now.Add(-90 * time.Second), Heartbeat: now.Add(-5 * time.Second), LeaseExpires: now.Add(40 * time.Second)}
	}
	dir := t.TempDir()
	for _, e := range []endpoints.Endpoint{
		ep("reasoning", "200", endpoints.StateDraining, "preempted", []string{"qwen-72b"}),
		ep("fast", "100", endpoints.StateReady, "head answers /health", []string{"a", "b"}),
	} {
		if err := endpoints.Write(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bad-1.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	scan, err := endpoints.ReadDir(dir, endpoints.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeStatusTable(&out, scan, now)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"TIER", "JOB", "RESTART", "ADDRESS", "STATE", "AGE", "LEASE", "LEFT", "MODELS"},
		{"fast", "100", "1", "10.0.0.1:8080", "ready", "1m30s", "40s", "a,b"},
		{"reasoning", "200", "1", "10.0.0.1:8080", "draining", "(preempted)", "1m30s", "40s", "qwen-72b"},
	}
	if len(lines) != 4 {
		t.Fatalf("status printed %d lines, want 4:\n%s", len(lines), out.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
	if !strings.HasPrefix(lines[3], "rejected bad-1.json:") {
		t.Errorf("last line = %q, want the rejected file", lines[3])
	}
}
