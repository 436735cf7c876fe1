package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
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
		{name: "doctor with a stray argument", args: []string{"doctor", "fast.toml"}, want: exitUsage},
		{name: "doctor with a config that is not there", args: []string{"doctor", "--config", "/nonexistent/fast.toml"}, want: exitUsage},
		{name: "doctor with a missing config", args: []string{"doctor", "--config", "/nonexistent.toml"}, want: exitUsage},
		{name: "doctor with an extra argument", args: []string{"doctor", "--config", "x.toml", "now"}, want: exitUsage},
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

// Regression: --help exited 2 (and printed to stderr) on every subcommand;
// help is not an error: exit 0, on stdout, as Go's tools and Slurm's do.
// A flag that does not exist is still a usage error.
func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"run", "status", "check-config", "shim", "doctor"} {
		for _, flag := range []string{"-h", "--help"} {
			t.Run(cmd+" "+flag, func(t *testing.T) {
				var out, errOut bytes.Buffer
				if got := dispatch([]string{cmd, flag}, strings.NewReader(""), &out, &errOut); got != exitOK {
					t.Errorf("exit code = %d, want 0", got)
				}
				if !strings.HasPrefix(out.String(), "usage: llm-supervisor "+cmd) || errOut.Len() != 0 {
					t.Errorf("stdout = %q, stderr = %q; want the usage on stdout only", out.String(), errOut.String())
				}
				// Regression (issue 29): flags were listed as -config
				// while the usage says --config.
				if strings.Contains(out.String(), "\n  -") && !strings.Contains(out.String(), "\n  --") {
					t.Errorf("flags listed with one dash:\n%s", out.String())
				}
			})
		}
		t.Run(cmd+" --no-such-flag", func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := dispatch([]string{cmd, "--no-such-flag"}, strings.NewReader(""), &out, &errOut); got != exitUsage {
				t.Errorf("exit code = %d, want %d", got, exitUsage)
			}
			if out.Len() != 0 || !strings.Contains(errOut.String(), "no-such-flag") {
				t.Errorf("stdout = %q, stderr = %q; want the error on stderr only", out.String(), errOut.String())
			}
		})
	}
}

func TestIdleExitFromEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "SLURM_LLM_IDLE_EXIT" {
				return v
			}
			return ""
		}
	}
	if d, err := idleExitFromEnv(env("")); d != 0 || err != nil {
		t.Errorf("unset: %v, %v", d, err)
	}
	if d, err := idleExitFromEnv(env("300s")); d != 5*time.Minute || err != nil {
		t.Errorf("300s: %v, %v", d, err)
	}
	for _, bad := range []string{"300", "0s", "-1m", "soon"} {
		if _, err := idleExitFromEnv(env(bad)); err == nil || !strings.Contains(err.Error(), "SLURM_LLM_IDLE_EXIT") {
			t.Errorf("%q: error %v, want one naming the variable", bad, err)
		}
	}
}
