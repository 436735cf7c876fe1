//go:build e2e

package slurm

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestE2ESrunArgv runs steps built by SrunArgv inside a real job (srun
// --jobid from outside it): the step lands on the named node, gets Env
// through the client's environment, and carries its name in squeue -s.
func TestE2ESrunArgv(t *testing.T) {
	c := &Client{}
	ctx := context.Background()
	id := submitSleeper(t, c, t.TempDir(), "")
	waitState(t, c, id, JobRunning)
	job, err := c.ShowJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	echo := Step{Node: job.BatchHost, Name: StepName("e2e", "echo"), ExtraArgs: []string{"--jobid=" + id},
		Env:  map[string]string{"E2E_VAR": "x,y z"},
		Argv: []string{"sh", "-c", `echo "$SLURMD_NODENAME $E2E_VAR"`}}
	argv := SrunArgv("srun", echo)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = echo.Environ(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", argv, err, out)
	}
	if got, want := strings.TrimSpace(string(out)), job.BatchHost+" x,y z"; got != want {
		t.Errorf("step printed %q, want %q", got, want)
	}

	sleeper := Step{Node: job.BatchHost, Name: StepName("e2e", "sleeper"), ExtraArgs: []string{"--jobid=" + id},
		Argv: []string{"sleep", "600"}}
	argv = SrunArgv("srun", sleeper)
	bg := exec.Command(argv[0], argv[1:]...)
	bg.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-bg.Process.Pid, syscall.SIGKILL)
		_ = bg.Wait()
	})
	waitFor(t, "the named step", func() (bool, error) {
		out, err := exec.Command("squeue", "-s", "-h", "-j", id, "-o", "%j").Output()
		return strings.Contains(string(out), "e2e:sleeper"), err
	})
}
