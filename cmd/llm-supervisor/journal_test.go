package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"slurm-llm/cmd/internal/journal"
)

// asMainEnv makes the test binary run main (TestMain), so that a test can
// run the program as a process of its own.
const asMainEnv = "LLM_SUPERVISOR_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// With its standard error the journal's stream (a supervisor started by
// hand under systemd-run, say), each log line begins with its level's
// syslog priority (issue 29); in a job, whose standard error is a file,
// the lines are as they were even when JOURNAL_STREAM was inherited.
func TestJournalPriorities(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, format := range []string{"text", "json"} {
		cmd := exec.Command(os.Args[0], "run", "--config", missing, "--log-format", format)
		cmd.Env = append(os.Environ(), asMainEnv+"=1")
		out, code, err := journal.RunAsService(cmd, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if code != exitUsage || !strings.HasPrefix(out, "<3>") || strings.Count(out, "\n") != strings.Count(out, "\n<")+1 {
			t.Errorf("%s: exit %d, standard error:\n%s\nwant %d and every line at <3>", format, code, out, exitUsage)
		}
	}
	cmd := exec.Command(os.Args[0], "run", "--config", missing)
	cmd.Env = append(os.Environ(), asMainEnv+"=1", "JOURNAL_STREAM=1:1")
	out, _ := cmd.CombinedOutput()
	if strings.HasPrefix(string(out), "<") {
		t.Errorf("JOURNAL_STREAM naming another stream: %s", out)
	}
}
