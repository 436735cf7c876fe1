package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"slurm-llm/cmd/internal/journal"
)

// asMainEnv makes the test binary run main (TestMain), so that a test can
// run the program as a process of its own.
const asMainEnv = "LLM_UPSTREAMS_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// Under systemd (its standard error the journal's stream) each log line
// begins with its level's syslog priority, so that `journalctl -p warning`
// filters (issue 29: every line was filed at one priority); elsewhere the
// lines are as they were.
func TestJournalPriorities(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"endpoints", "out"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := "endpoint_dir = \"" + root + "/endpoints\"\noutput_dir = \"" + root + "/out\"\nlock_file = \"" + root + "/lock\"\n" +
		anyOwnerAnyNetwork + "[scheduler]\ncheck = false\n[tiers.fast]\n[nginx]\ntest = [\"false\"]\nreload = [\"true\"]\n"
	failing, good := filepath.Join(root, "failing.toml"), filepath.Join(root, "good.toml")
	if err := os.WriteFile(failing, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte(strings.Replace(conf, `test = ["false"]`, `test = ["true"]`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// An endpoint directory others can write: a warning at each start.
	if err := os.Chmod(filepath.Join(root, "endpoints"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		want    []string // lines that begin so
		journal bool
	}{
		{"errors at 3, warnings at 4", []string{"sync", "--config", failing}, []string{"<3>", "<4>"}, true},
		{"info at 6", []string{"sync", "--config", good}, []string{"<6>", "<4>"}, true},
		{"json", []string{"sync", "--config", good, "--log-format", "json"}, []string{`<6>{"@level":"info"`, `<4>{"@level":"warn"`}, true},
		{"the keeper's", []string{"keep", "--once", "--config", filepath.Join(root, "missing.toml")}, []string{"<3>"}, true},
		{"not under systemd", []string{"sync", "--config", failing}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), asMainEnv+"=1")
			var out string
			var err error
			if tc.journal {
				out, _, err = journal.RunAsService(cmd, t.TempDir())
			} else {
				var b []byte
				b, err = cmd.CombinedOutput()
				out = string(b)
				if _, ok := err.(*exec.ExitError); ok {
					err = nil
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			for _, line := range lines {
				if prefixed := len(line) > 3 && line[0] == '<' && line[2] == '>'; prefixed != tc.journal {
					t.Errorf("line %q: priority prefix %v, want %v", line, prefixed, tc.journal)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains("\n"+out, "\n"+w) {
					t.Errorf("no line begins with %s:\n%s", w, out)
				}
			}
		})
	}
}

// The front door's access log on standard error is at info under systemd.
func TestAccessLogUnderJournal(t *testing.T) {
	w, closeLog, err := openAccessLog("-")
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	if _, ok := w.(*journal.Writer); ok {
		t.Fatalf("access log wrapped without the journal's stream")
	}
	t.Setenv("JOURNAL_STREAM", stderrStream(t))
	w, closeLog, err = openAccessLog("-")
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog()
	if _, ok := w.(*journal.Writer); !ok {
		t.Fatalf("access log on the journal's stream is %T, want a *journal.Writer", w)
	}
}

// stderrStream is JOURNAL_STREAM's value naming this process's standard
// error.
func stderrStream(t *testing.T) string {
	t.Helper()
	fi, err := os.Stderr.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
