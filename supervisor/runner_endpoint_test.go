package supervisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/supervisor/clock"
	"slurm-llm/supervisor/tier"
)

func TestRunnerEndpointContent(t *testing.T) {
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	now := t0.Add(90 * time.Second)
	plan := &tier.Plan{Tier: "fast", JobID: "123", RestartCount: 2, EndpointHost: "10.0.0.5", EndpointPort: 8081,
		Head: tier.Process{Name: "head", Node: "gpu07", Argv: []string{"llama-server"}},
		Timeouts: tier.Timeouts{WorkerStart: 1, Load: 1, HealthInterval: 1, HealthTimeout: 1, UnhealthyAfter: 1,
			StopGrace: 1, Heartbeat: 15 * time.Second, Lease: 45 * time.Second},
		Drain: tier.DrainSettings{InFlightPoll: 1}}
	r, err := New(plan, Options{Launcher: LocalLauncher{}, PID: 4242, Clock: clock.NewFake(now), RunID: "00000000000000aa"})
	if err != nil {
		t.Fatal(err)
	}
	r.startedAt = t0
	tests := []struct {
		name   string
		state  State
		reason string
		models []string
		want   endpoints.Endpoint
		wantOK bool
	}{
		{name: "starting without models", state: StateStarting, reason: "starting", wantOK: true,
			want: endpoints.Endpoint{State: endpoints.StateStarting, Reason: "starting", Models: []string{}}},
		{name: "ready with models", state: StateReady, reason: "head answers /health", models: []string{"a", "b"}, wantOK: true,
			want: endpoints.Endpoint{State: endpoints.StateReady, Reason: "head answers /health", Models: []string{"a", "b"}}},
		{name: "recovering publishes starting", state: StateRecovering, reason: "rpc-node2: exited: exit code 134", wantOK: true,
			want: endpoints.Endpoint{State: endpoints.StateStarting, Reason: "rpc-node2: exited: exit code 134", Models: []string{}}},
		{name: "draining", state: StateDraining, reason: "preempted", wantOK: true,
			want: endpoints.Endpoint{State: endpoints.StateDraining, Reason: "preempted", Models: []string{}}},
		{name: "stopped has no file", state: StateStopped},
		{name: "failed has no file", state: StateFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.state, r.reason, r.models = tt.state, tt.reason, tt.models
			got, ok := r.endpoint()
			if ok != tt.wantOK {
				t.Fatalf("endpoint ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			want := tt.want
			want.Schema, want.Tier, want.JobID, want.RestartCount = endpoints.SchemaVersion, "fast", "123", 2
			want.Host, want.Port, want.Node, want.PID = "10.0.0.5", 8081, "gpu07", 4242
			want.StartedAt, want.Heartbeat, want.LeaseExpires = t0, now, now.Add(45*time.Second)
			want.RunID = "00000000000000aa"
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("endpoint (-want +got):\n%s", d)
			}
			if err := endpoints.Validate(got); err != nil {
				t.Errorf("endpoint does not validate: %v", err)
			}
		})
	}
}

func TestTruncateReason(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "short", in: "worker exited", want: "worker exited"},
		{name: "control characters", in: "line1\nline2\ttab\x1b[31m", want: "line1 line2 tab [31m"},
		{name: "long ascii", in: strings.Repeat("a", 300), want: strings.Repeat("a", 200) + "…"},
		{name: "long multibyte cut at a rune", in: "a" + strings.Repeat("é", 150), want: "a" + strings.Repeat("é", 99) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncateReason(tt.in)
			if got != tt.want {
				t.Errorf("truncateReason = %q, want %q", got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("truncateReason gave invalid UTF-8 %q", got)
			}
		})
	}
}

// TestASquattedEndpointFileIsNeitherTrustedNorReplaced: a user who creates
// the job's endpoint file first (a job id is public while the job is
// pending) with a newer restart count made the old publisher believe a
// newer run owned the file and stop the tier (issue 23, item 2). Now the
// file is not this account's, so it is not trusted; the tier says loudly
// that its name was taken, and the file is left as it is. So must a FIFO
// under the name (the old reader blocked on it).
func TestASquattedEndpointFileIsNeitherTrustedNorReplaced(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file another owner")
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ours := endpoints.Endpoint{
		Schema: endpoints.SchemaVersion, Tier: "fast", JobID: "1234",
		Host: "node1", Port: 8080, State: endpoints.StateReady, Node: "node1", PID: 4242,
		StartedAt: t0, Heartbeat: t0, LeaseExpires: t0.Add(time.Minute), RunID: "0123456789abcdef",
	}
	forged := ours
	forged.RestartCount, forged.RunID = 99, "fedcba9876543210"
	for _, squat := range []string{"another user's file", "a FIFO"} {
		t.Run(squat, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, endpoints.FileName("fast", "1234"))
			if squat == "a FIFO" {
				if err := syscall.Mkfifo(path, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := endpoints.Marshal(forged)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(path, 4242, 4242); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.Lstat(path)
			var logs bytes.Buffer
			log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			superseded := 0
			p := newPublisher(dir, ours.RunID, "", time.Minute, log, func() { superseded++ })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.publish(ours) // the latest call wins: wait for each
			if err := p.wait(ctx); err != nil {
				t.Fatalf("the publisher did not finish (blocked on the file?): %v", err)
			}
			p.remove("fast", "1234")
			if err := p.wait(ctx); err != nil {
				t.Fatalf("the publisher did not finish (blocked on the file?): %v", err)
			}
			if superseded != 0 {
				t.Errorf("a squatted file made the run believe it was superseded")
			}
			after, err := os.Lstat(path)
			if err != nil || !os.SameFile(before, after) {
				t.Errorf("the squatted file was replaced or removed (%v)", err)
			}
			if !strings.Contains(logs.String(), "[ERROR] cannot publish the tier") || !strings.Contains(logs.String(), "taken by someone else") {
				t.Errorf("no loud log line says the name was taken:\n%s", logs.String())
			}
		})
	}
}
