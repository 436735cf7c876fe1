package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"slurm-llm/slurm"
)

// shimMargin is how much longer than the stop grace the supervisor waits
// for a shimmed step: the shim runs its own grace before SIGKILL.
const shimMargin = 2 * time.Second

// cancelTimeout bounds the last-resort scancel of a step.
const cancelTimeout = 10 * time.Second

// SrunLauncher starts each process as its own step of the current job:
// `srun -N1 -n1 -w NODE --overlap --job-name=STEP … -- argv` (slurm.SrunArgv,
// with --verbose so that srun names the step id). The process's environment
// goes on the srun client, which passes it to the task.
//
// Stopping: with a shim, "stop" on the step's stdin (the shim stops its
// child: signal, grace, SIGKILL), then "stop-now"; without one, SIGTERM to
// the srun client (srun then ends the step). Last resort, SIGKILL to the
// srun client and CancelStep of the step: a killed srun client must not
// leave its task running.
type SrunLauncher struct {
	// Srun is the srun program; "srun" when empty.
	Srun string
	// Env, when set, replaces os.Environ() as the base environment.
	Env []string
	// CancelStep ends a step ("JOB.STEP"), e.g. slurm.Client.Cancel; nil
	// skips that last resort.
	CancelStep func(ctx context.Context, step string) error
	// Shim, when set, is the argv prefix that wraps each process in the
	// shim (e.g. ["/usr/bin/llm-supervisor", "shim"]); ShimArgs returns the
	// flags for one step. Nil runs processes directly under srun.
	Shim []string
	// ShimArgs returns the shim's flags (token, grace) for one process, up
	// to but not including "--".
	ShimArgs func(p Process) ([]string, error)
	// OnLine, if set, is called with every line of every step's output
	// (srun's and the shim's messages included), on the goroutine that
	// copies it; it must return quickly.
	OnLine func(p Process, line string)
}

// Start implements Launcher.
func (l SrunLauncher) Start(p Process) (Handle, error) {
	if len(p.Argv) == 0 || p.Node == "" {
		return nil, errors.New("start " + p.Name + ": empty argv or no node")
	}
	argv := p.Argv
	if l.Shim != nil {
		extra, err := l.ShimArgs(p)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", p.Name, err)
		}
		argv = append(append(append(append([]string(nil), l.Shim...), extra...), "--"), p.Argv...)
	}
	srun := l.Srun
	if srun == "" {
		srun = "srun"
	}
	step := slurm.Step{Node: p.Node, Name: p.StepName, Env: p.Env, Argv: argv,
		ExtraArgs: append([]string{"--verbose"}, p.SrunArgs...)}
	full := slurm.SrunArgv(srun, step)
	cmd := exec.Command(full[0], full[1:]...)
	base := l.Env
	if base == nil {
		base = os.Environ()
	}
	cmd.Env = step.Environ(base)
	if l.Shim != nil {
		return l.startShimmed(cmd, p)
	}
	pr, err := startProc(cmd, p, l.OnLine)
	if err != nil {
		return nil, err
	}
	pr.kill = l.killStep
	return pr, nil
}

// startShimmed starts a shimmed step with a pipe on its stdin for the
// shim's commands, and routes term and kill through it.
func (l SrunLauncher) startShimmed(cmd *exec.Cmd, p Process) (Handle, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: stdin pipe: %w", p.Name, err)
	}
	cmd.Stdin = r
	pr, err := startProc(cmd, p, l.OnLine)
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	pr.onExit = func() { w.Close() }
	pr.term = func(pr *proc) { _, _ = w.Write([]byte("stop\n")) }
	pr.extraGrace = shimMargin
	pr.kill = func(pr *proc) {
		_, _ = w.Write([]byte("stop-now\n"))
		l.killStep(pr)
	}
	return pr, nil
}

// killStep SIGKILLs the srun client's group and cancels its step.
func (l SrunLauncher) killStep(pr *proc) {
	pr.signalGroup(syscall.SIGKILL)
	_, _, stepID := pr.watch.facts()
	if l.CancelStep == nil || stepID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_ = l.CancelStep(ctx, stepID)
}
