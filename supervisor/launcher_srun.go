package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"slurm-llm/slurm"
	"slurm-llm/supervisor/shim"
	"slurm-llm/supervisor/tier"
)

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
	// Shim, when set, is the command that runs the shim (e.g.
	// ["/usr/bin/llm-supervisor", "shim"]); each process then runs as
	// `Shim... --token T --grace ShimGrace --hold ShimHold -- argv` with a fresh token. Nil
	// runs processes directly under srun.
	Shim []string
	// ShimGrace is the shim's --grace: how long its child has after the
	// stop signal before SIGKILL; zero leaves the shim's default.
	ShimGrace time.Duration
	// ShimHold is the shim's --hold: how long it keeps its child through
	// Slurm's SIGTERM when no "stop" comes (the supervisor is stuck or
	// gone). Hold + grace must end inside the drain budget. Zero leaves the
	// shim's default.
	ShimHold time.Duration
	// OnShimEvent, if set, is called with every marker a step's shim
	// writes (started, signal from Slurm, stopping, exited), on the
	// goroutine that copies the output; it must return quickly. A "signal"
	// event is Slurm's stop notice (preemption, cancel) reaching the step.
	OnShimEvent func(p tier.Process, ev shim.Event)
	// OnLine, if set, is called with every line of every step's output
	// (srun's and the shim's messages included), on the goroutine that
	// copies it; it must return quickly.
	OnLine func(p tier.Process, line string)
}

// Start implements Launcher.
func (l SrunLauncher) Start(p tier.Process) (Handle, error) {
	if len(p.Argv) == 0 || p.Node == "" {
		return nil, errors.New("start " + p.Name + ": empty argv or no node")
	}
	argv, token := p.Argv, ""
	if l.Shim != nil {
		var err error
		if token, err = shim.NewToken(); err != nil {
			return nil, fmt.Errorf("start %s: %w", p.Name, err)
		}
		argv = append(append([]string(nil), l.Shim...), "--token", token)
		if l.ShimGrace > 0 {
			argv = append(argv, "--grace", l.ShimGrace.String())
		}
		if l.ShimHold > 0 {
			argv = append(argv, "--hold", l.ShimHold.String())
		}
		if p.Port > 0 {
			argv = append(argv, "--port", strconv.Itoa(p.Port))
		}
		if !p.LeaseUntil.IsZero() {
			argv = append(argv, "--lease-until", p.LeaseUntil.UTC().Format(time.RFC3339Nano))
		}
		argv = append(append(argv, "--"), p.Argv...)
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
		return l.startShimmed(cmd, p, token)
	}
	return startProc(cmd, p, l.OnLine, "", func(pr *proc) { pr.kill = l.killStep })
}

// StopMargin is how much longer than the stop grace a Stop may take: a
// shimmed step gets the shim's own grace first. The runner keeps it out of
// the drain budget.
func (l SrunLauncher) StopMargin() time.Duration {
	if l.Shim != nil {
		return tier.ShimMargin
	}
	return 0
}

// startShimmed starts a shimmed step with a pipe on its stdin for the
// shim's commands, and routes term and kill through it.
func (l SrunLauncher) startShimmed(cmd *exec.Cmd, p tier.Process, token string) (Handle, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: stdin pipe: %w", p.Name, err)
	}
	cmd.Stdin = r
	pr, err := startProc(cmd, p, l.shimLines(token), token, func(pr *proc) {
		pr.onExit = func() { w.Close() }
		pr.term = func(pr *proc) { _, _ = w.Write(shim.StopCommand(false)) }
		pr.renew = func(until time.Time) { _, _ = w.Write(shim.LeaseCommand(until)) }
		pr.extraGrace = tier.ShimMargin
		pr.kill = func(pr *proc) {
			_, _ = w.Write(shim.StopCommand(true))
			l.killStep(pr)
		}
	})
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return pr, nil
}

// shimLines returns the line hook of a shimmed step: markers carrying the
// step's token go to OnShimEvent, every line to OnLine.
func (l SrunLauncher) shimLines(token string) func(tier.Process, string) {
	return func(p tier.Process, line string) {
		if l.OnShimEvent != nil && strings.HasPrefix(line, shim.MarkerPrefix) {
			if ev, ok := shim.ParseMarker(line, token); ok {
				l.OnShimEvent(p, ev)
			}
		}
		if l.OnLine != nil {
			l.OnLine(p, line)
		}
	}
}

// killStep SIGKILLs the srun client's group and cancels its step.
func (l SrunLauncher) killStep(pr *proc) {
	pr.signalGroup(syscall.SIGKILL)
	stepID := pr.watch.facts().stepID
	if l.CancelStep == nil || stepID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tier.KillMargin)
	defer cancel()
	_ = l.CancelStep(ctx, stepID)
}
