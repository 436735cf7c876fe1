package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The script bash sources completes commands, each command's own flags
// (read from its --help), tier forms and flag values, in a real bash.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script, errb bytes.Buffer
	if code := run([]string{"completion", "bash"}, &script, &errb); code != exitOK {
		t.Fatalf("completion bash: exit %d: %s", code, errb.String())
	}
	path := filepath.Join(t.TempDir(), "llm-upstreams.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string // what is typed; the last word is completed
		want string
	}{
		{"llm-upstreams sy", "sync"},
		{"llm-upstreams ", "sync watch front status report init doctor keep tier key usage completion --version --help"},
		{"llm-upstreams status --js", "--json"},
		{"llm-upstreams keep --on", "--once"},
		{"llm-upstreams keep st", "status"},
		{"llm-upstreams keep status --", "--config --json --log-format --log-level"},
		{"llm-upstreams tier ", "disable enable scale grow handover"},
		{"llm-upstreams tier disable fast --can", "--cancel"},
		{"llm-upstreams watch --log-level w", "warn"},
		{"llm-upstreams completion ", "bash"},
		{"llm-upstreams usage --b", "--by"},
	} {
		words := strings.Fields(tc.line)
		if strings.HasSuffix(tc.line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + path + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "; _llm_upstreams; echo \"${COMPREPLY[*]}\""
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
		}
	}
	if code := run([]string{"completion", "zsh"}, &script, &errb); code != exitUsage {
		t.Errorf("completion zsh: exit %d, want %d", code, exitUsage)
	}
}
