package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
)

// anyOwnerAnyNetwork opts a test config out of the owner and network checks.
const anyOwnerAnyNetwork = "allow_any_owner = true\nallow_any_network = true\n"

func TestRunExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "endpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "endpoint_dir = \"" + root + "/endpoints\"\noutput_dir = \"" + root + "/out\"\nlock_file = \"" + root + "/lock\"\n" + anyOwnerAnyNetwork +
		"[scheduler]\ncheck = false\n[tiers.fast]\n"
	if err := os.WriteFile(good, []byte(conf+"[nginx]\ntest = [\"true\"]\nreload = [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(dir, "failing.toml")
	if err := os.WriteFile(failing, []byte(conf+"[nginx]\ntest = [\"false\"]\nreload = [\"true\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	noKeeper := filepath.Join(dir, "no-keeper.toml") // never written: no keeper here
	keeperConf := filepath.Join(dir, "keeper.toml")
	keeperText := "state_dir = \"" + filepath.Join(dir, "keeper") + "\"\nscheduler_timeout = \"1s\"\n" +
		"[tiers.fast]\nscript = \"/bin/true\"\n"
	if err := os.WriteFile(keeperConf, []byte(keeperText), 0o644); err != nil {
		t.Fatal(err)
	}
	// The keeper in use is named by the controller's config, not the site path.
	withKeeper := filepath.Join(dir, "with-keeper.toml")
	if err := os.WriteFile(withKeeper, []byte("keeper_config = \""+keeperConf+"\"\n"+conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// A record with one preemption of fast: down at 10:00:00, back at 10:00:04.
	stateDir := filepath.Join(dir, "state")
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	record := `{"time":"2026-11-23T09:00:00Z","event":"start"}
{"time":"2026-11-23T09:00:00Z","event":"state","tier":"fast","state":"routed","reason":"routed"}
{"time":"2026-11-23T10:00:00Z","event":"state","tier":"fast","state":"down","reason":"preempted by a higher-priority job","job":"7"}
{"time":"2026-11-23T10:00:04Z","event":"state","tier":"fast","state":"routed","reason":"routed"}
`
	if err := os.WriteFile(filepath.Join(stateDir, "availability.jsonl"), []byte(record), 0o644); err != nil {
		t.Fatal(err)
	}
	withState := filepath.Join(dir, "with-state.toml")
	if err := os.WriteFile(withState, []byte("state_dir = \""+stateDir+"\"\n"+conf), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("endpoint_dir = \"/e\"\nsweep = \"1s\"\n[tiers.fast]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{name: "version", args: []string{"--version"}, code: exitOK, stdout: "llm-upstreams dev"},
		{name: "no args", args: nil, code: exitUsage, stderr: "usage"},
		{name: "tier dispatched to the keeper", args: []string{"tier"}, code: exitUsage, stderr: "usage: llm-upstreams tier"},
		{name: "unknown command", args: []string{"frob", "--config", good}, code: exitUsage, stderr: `unknown command "frob"`},
		// Regression (issue 29): the config was read first, so a bad one
		// hid the unknown command.
		{name: "unknown command before the config", args: []string{"frob", "--config", bad}, code: exitUsage, stderr: `unknown command "frob"`},
		{name: "bad log format", args: []string{"sync", "--log-format", "xml"}, code: exitUsage, stderr: `--log-format "xml": want text or json`},
		// Regression (issue 29): any --log-level was taken (as info).
		{name: "bad log level", args: []string{"sync", "--log-level", "loud", "--config", good}, code: exitUsage, stderr: `--log-level "loud": want trace`},
		{name: "bad log level, keep", args: []string{"keep", "--log-level", "loud", "--config", keeperConf}, code: exitUsage, stderr: `--log-level "loud": want trace`},
		{name: "json logs", args: []string{"status", "--log-format", "json", "--config", bad}, code: exitUsage, stderr: `"@level":"error"`},
		{name: "unknown flag", args: []string{"sync", "--nope"}, code: exitUsage, stderr: "usage"},
		{name: "unknown config key", args: []string{"status", "--config", bad}, code: exitUsage, stderr: "bad.toml:2: sweep: unknown key"},
		{name: "doctor, bad config", args: []string{"doctor", "--config", bad}, code: exitUsage, stderr: "bad.toml:2: sweep: unknown key"},
		{name: "doctor, extra argument", args: []string{"doctor", "now"}, code: exitUsage, stderr: "usage"},
		{name: "sync, nginx test fails", args: []string{"sync", "--config", failing}, code: exitFailed, stderr: "nginx config test failed"},
		{name: "sync", args: []string{"sync", "--config", good}, code: exitOK, stderr: "reloaded=true"},
		{name: "status", args: []string{"status", "--config", good, "--keeper-config", noKeeper}, code: exitOK, stdout: "none (503)"},
		{name: "status json", args: []string{"status", "--json", "--config", good, "--keeper-config", noKeeper}, code: exitOK, stdout: `"tiers"`},
		// Regression: status showed the keeper of the site config even when
		// the keeper in use had another (the demo printed "none" for both
		// running tiers).
		{name: "status shows the keeper the config names", args: []string{"status", "--config", withKeeper}, code: exitOK,
			stdout: "KEEPER (" + keeperConf + ")\nTIER"},
		{name: "report", args: []string{"report", "--since", "2026-11-23T00:00:00Z", "--config", withState}, code: exitOK,
			stdout: "4s / 4s / 4s"},
		{name: "report json", args: []string{"report", "--json", "--since", "2026-11-23T00:00:00Z", "--config", withState}, code: exitOK,
			stdout: `"preemptions": 1`},
		{name: "report, bad --since", args: []string{"report", "--since", "last week", "--config", withState}, code: exitUsage,
			stderr: "--since"},
		{name: "report without a state dir", args: []string{"report", "--config", good}, code: exitFailed, stderr: "no state_dir"},
		{name: "status with the keeper", args: []string{"status", "--config", good, "--keeper-config", keeperConf}, code: exitOK, stdout: "KEEPER (" + keeperConf + ")\nTIER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.code || !strings.Contains(out.String(), tt.stdout) || !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("run(%v) = %d\nstdout: %s\nstderr: %s\nwant code %d, stdout with %q, stderr with %q",
					tt.args, code, out.String(), errb.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// watch re-reads its config on SIGHUP and exits 0 on SIGTERM.
func TestRunWatchSignals(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"endpoints", "out"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := "endpoint_dir = \"" + root + "/endpoints\"\noutput_dir = \"" + root + "/out\"\nlock_file = \"" + root + "/lock\"\n" + anyOwnerAnyNetwork +
		"[scheduler]\ncheck = false\n[nginx]\ntest = [\"true\"]\nreload = [\"true\"]\n[tiers.fast]\n"
	path := filepath.Join(root, "c.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() { code <- run([]string{"watch", "--config", path}, io.Discard, &faketest.Buffer{}) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-code
		}
	})
	waitFile(t, filepath.Join(root, "out", "upstream-fast.conf"))
	if err := os.WriteFile(path, []byte(conf+"[tiers.code]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(root, "out", "upstream-code.conf"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if c := <-code; c != exitOK {
		t.Errorf("watch exit code = %d, want %d", c, exitOK)
	}
}

// waitFile polls until path exists or 10 s pass.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 10s", path)
		}
		<-tick.C
	}
}

// Regression: --help exited 2 and printed to stderr, on the program and on
// every subcommand; Go tools and Slurm's exit 0 and print to stdout.
func TestHelpExitsZeroOnStdout(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in stdout
	}{
		{name: "program", args: []string{"--help"}, want: "usage: llm-upstreams sync|watch|front|status"},
		{name: "program, -h", args: []string{"-h"}, want: "usage: llm-upstreams sync|watch|front|status"},
		{name: "program, help", args: []string{"help"}, want: "usage: llm-upstreams sync|watch|front|status"},
		{name: "sync", args: []string{"sync", "--help"}, want: "\n  --config string"},
		{name: "watch", args: []string{"watch", "-h"}, want: "\n  --config string"},
		{name: "status", args: []string{"status", "--help"}, want: "\n  --json"},
		{name: "report", args: []string{"report", "--help"}, want: "\n  --since"},
		{name: "doctor", args: []string{"doctor", "--help"}, want: "llm-upstreams doctor [--config FILE] [--json]"},
		{name: "keep", args: []string{"keep", "--help"}, want: "\n  --interval"},
		{name: "keep status", args: []string{"keep", "status", "--help"}, want: "\n  --json"},
		{name: "tier", args: []string{"tier", "--help"}, want: "\n  --cancel"},
		{name: "tier disable", args: []string{"tier", "disable", "fast", "-h"}, want: "usage: llm-upstreams tier disable NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != exitOK || !strings.Contains(out.String(), tt.want) || errb.Len() != 0 {
				t.Errorf("run(%v) = %d\nstdout: %s\nstderr: %s\nwant 0, stdout with %q, nothing on stderr", tt.args, code, out.String(), errb.String(), tt.want)
			}
			// Regression (issue 29): the usage says --config, the flags
			// were listed as -config.
			if strings.Contains(out.String(), "\n  -") && !strings.Contains(out.String(), "\n  --") {
				t.Errorf("flags listed with one dash:\n%s", out.String())
			}
		})
	}
}
