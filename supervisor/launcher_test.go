package supervisor

import (
	"os"
	"path/filepath"
	"slurm-llm/supervisor/tier"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// startSh runs a shell script through LocalLauncher and ends it in Cleanup.
func startSh(t *testing.T, script, pattern string) (Handle, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "p.log")
	h, err := LocalLauncher{}.Start(tier.Process{Name: "p", Argv: []string{"sh", "-c", script}, LogPath: log, ReadyPattern: pattern})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Kill)
	return h, log
}

// waitDone waits for h to exit, failing the test after a generous deadline.
func waitDone(t *testing.T, h Handle) ExitResult {
	t.Helper()
	select {
	case <-h.Done():
		return h.Result()
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit")
		return ExitResult{}
	}
}

func TestLauncherExitCause(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   ExitResult
		text   string
	}{
		{name: "clean exit", script: "exit 0", want: ExitResult{}, text: "exit code 0"},
		{name: "exit code", script: "exit 3", want: ExitResult{Code: 3}, text: "exit code 3"},
		{name: "killed by a signal", script: "kill -9 $$", want: ExitResult{Code: -1, Signal: syscall.SIGKILL}, text: "signal killed"},
		{name: "srun reports a killed task", script: "echo 'srun: error: node2: task 0: Killed' >&2; exit 137",
			want: ExitResult{Code: 137, Signal: syscall.SIGKILL, TaskStatus: "Killed"},
			text: "exit code 137 (signal killed), srun: task Killed"},
		{name: "srun reports an exit code", script: "echo 'srun: error: node2: task 0: Exited with exit code 3' >&2; exit 3",
			want: ExitResult{Code: 3, TaskStatus: "Exited with exit code 3"},
			text: "exit code 3, srun: task Exited with exit code 3"},
		{name: "oom kill reported by slurmstepd", script: "echo 'slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5.0. Some of your processes may have been killed by the cgroup out-of-memory handler.' >&2; " +
			"echo 'srun: error: node2: task 0: Out Of Memory' >&2; exit 137",
			want: ExitResult{Code: 137, Signal: syscall.SIGKILL, OOM: true, TaskStatus: "Out Of Memory"},
			text: "exit code 137 (signal killed), srun: task Out Of Memory, killed for memory (oom-kill)"},
		{name: "Slurm refuses the step", script: "echo \"srun: jobid 496: nodes(2):\\`node[1-3]', cpu counts: 1(x3)\" >&2; " +
			"echo 'srun: error: Unable to create step for job 496: Requested node configuration is not available' >&2; exit 1",
			want: ExitResult{Code: 1, StepRefused: "Requested node configuration is not available"},
			text: "exit code 1, Slurm refused the step: Requested node configuration is not available"},
		{name: "unterminated last line is scanned", script: "printf 'srun: error: n: task 0: Killed' >&2; exit 137",
			want: ExitResult{Code: 137, Signal: syscall.SIGKILL, TaskStatus: "Killed"},
			text: "exit code 137 (signal killed), srun: task Killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := startSh(t, tt.script, "")
			got := waitDone(t, h)
			if d := cmp.Diff(tt.want, got, cmpopts.EquateErrors()); d != "" {
				t.Errorf("Result (-want +got):\n%s", d)
			}
			if got.String() != tt.text {
				t.Errorf("String() = %q, want %q", got.String(), tt.text)
			}
		})
	}
}

func TestLauncherReadyPatternAndLog(t *testing.T) {
	h, log := startSh(t, "echo booting; echo 'Starting RPC server v1'; read x", "Starting RPC server")
	select {
	case <-h.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("ready pattern not seen")
	}
	h.Stop(5 * time.Second)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"booting\n", "Starting RPC server v1\n", "start p: sh -c", "p ended:"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log lacks %q:\n%s", want, b)
		}
	}
}

func TestLauncherStopKillsAfterGrace(t *testing.T) {
	// A process that ignores SIGTERM, and its child in the same group.
	h, _ := startSh(t, "trap '' TERM; sleep 1000 & echo started; wait", "started")
	<-h.Ready()
	h.Stop(100 * time.Millisecond)
	if got := h.Result(); got.Signal != syscall.SIGKILL {
		t.Errorf("Result = %v, want killed by SIGKILL", got)
	}
	waitGroupGone(t, h.PID())
}

// waitGroupGone waits until no live process of group pgid is left.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(groupMembers(pgid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLauncherStartError(t *testing.T) {
	_, err := LocalLauncher{}.Start(tier.Process{Name: "p", Argv: []string{"/nonexistent/binary"}, LogPath: filepath.Join(t.TempDir(), "p.log")})
	if err == nil {
		t.Fatal("Start of a missing binary: no error")
	}
	if _, err := (LocalLauncher{}).Start(tier.Process{Name: "p", LogPath: filepath.Join(t.TempDir(), "p.log")}); err == nil {
		t.Fatal("Start with an empty argv: no error")
	}
}

func TestLauncherOnLine(t *testing.T) {
	var mu sync.Mutex
	var got []string
	l := LocalLauncher{OnLine: func(p tier.Process, line string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p.Name+": "+line)
	}}
	h, err := l.Start(tier.Process{Name: "p", Argv: []string{"sh", "-c", "echo one; echo two >&2; printf three"},
		LogPath: filepath.Join(t.TempDir(), "p.log")})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(got)
	if d := cmp.Diff([]string{"p: one", "p: three", "p: two"}, got); d != "" {
		t.Errorf("lines (-want +got):\n%s", d)
	}
}
