package main

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/supervisor/shim"
)

func TestParseShimFlags(t *testing.T) {
	type parsed struct {
		Argv       []string
		Token      string
		Hold       time.Duration
		Grace      time.Duration
		StopSignal syscall.Signal
		Unshielded bool
		Level      hclog.Level
	}
	tests := []struct {
		name    string
		args    []string
		want    parsed
		wantErr string
	}{
		{name: "defaults", args: []string{"--token", "T", "--", "rpc-server", "-p", "50052"},
			want: parsed{Argv: []string{"rpc-server", "-p", "50052"}, Token: "T", Hold: shim.DefaultHold,
				Grace: shim.DefaultGrace, StopSignal: syscall.SIGINT, Level: hclog.Info}},
		{name: "everything", args: []string{"--token", "T", "--hold", "25s", "--grace", "3s",
			"--stop-signal", "term", "--unshielded", "--log-level", "debug", "--", "llama-server"},
			want: parsed{Argv: []string{"llama-server"}, Token: "T", Hold: 25 * time.Second,
				Grace: 3 * time.Second, StopSignal: syscall.SIGTERM, Unshielded: true, Level: hclog.Debug}},
		{name: "hold 0 is no hold", args: []string{"--token", "T", "--hold", "0", "--", "x"},
			want: parsed{Argv: []string{"x"}, Token: "T", Hold: -1, Grace: shim.DefaultGrace,
				StopSignal: syscall.SIGINT, Level: hclog.Info}},
		{name: "no command", args: []string{"--token", "T", "--"}, wantErr: "no command"},
		{name: "bad signal", args: []string{"--token", "T", "--stop-signal", "NOPE", "--", "x"}, wantErr: "stop-signal"},
		{name: "zero grace", args: []string{"--token", "T", "--grace", "0s", "--", "x"}, wantErr: "grace"},
		{name: "bad level", args: []string{"--token", "T", "--log-level", "loud", "--", "x"}, wantErr: "log-level"},
		{name: "unknown flag", args: []string{"--bogus", "--", "x"}, wantErr: "bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, level, err := parseShimFlags(tt.args, &stderr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseShimFlags: %v", err)
			}
			got := parsed{Argv: cfg.Argv, Token: cfg.Token, Hold: cfg.Hold, Grace: cfg.Grace,
				StopSignal: cfg.StopSignal, Unshielded: cfg.Unshielded, Level: level}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("parsed (-want +got):\n%s", d)
			}
		})
	}
}

// TestRunShimExitStatus runs the subcommand end to end around a real
// child: it exits with the child's status and writes its markers.
func TestRunShimExitStatus(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runShim([]string{"--token", "T", "--", "sh", "-c", "echo out; exit 4"},
		strings.NewReader(""), &stdout, &stderr)
	if code != 4 || stdout.String() != "out\n" {
		t.Errorf("runShim = %d, stdout %q; want 4, %q", code, stdout.String(), "out\n")
	}
	var kinds []shim.EventKind
	for _, line := range strings.Split(stderr.String(), "\n") {
		if ev, ok := shim.ParseMarker(line, "T"); ok {
			kinds = append(kinds, ev.Kind)
		}
	}
	if len(kinds) == 0 || kinds[0] != shim.EventStarted || kinds[len(kinds)-1] != shim.EventExited {
		t.Errorf("markers %v, want started … exited; stderr:\n%s", kinds, stderr.String())
	}
}
