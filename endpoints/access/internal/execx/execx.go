// Package execx runs the outside commands package access asks (unmunge,
// munge, sacctmgr, sshare): no shell, a bounded time, bounded output, and
// a runner tests replace.
package execx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"slurm-llm/slurm"
)

// Runner runs argv with stdin and returns what it printed. err is an
// *exec.ExitError when the command ran and failed, anything else when it
// could not run. Tests inject one; nil means Exec.
type Runner func(ctx context.Context, argv []string, stdin []byte) (stdout, stderr []byte, err error)

// MaxOutput bounds what is kept of a command's stdout and stderr each.
const MaxOutput = 1 << 20

// Exec runs argv (no shell) with stdin, keeping at most MaxOutput bytes
// of each output; a context that ends kills it.
func Exec(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
	return run(ctx, argv, stdin, nil)
}

// Slurm is Exec for a Slurm command whose output is parsed (sacctmgr,
// sshare): it runs in slurm.CommandEnv's environment, so that a site's
// SLURM_TIME_FORMAT or SQUEUE_* settings never reach it.
func Slurm(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
	return run(ctx, argv, stdin, slurm.CommandEnv(os.Environ()))
}

// run is Exec with env (nil: this process's environment).
func run(ctx context.Context, argv []string, stdin []byte, env []string) ([]byte, []byte, error) {
	stdout, stderr := &capped{n: MaxOutput}, &capped{n: MaxOutput}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return stdout.b.Bytes(), stderr.b.Bytes(), err
}

// Run runs argv with runner (nil: Exec) under timeout, and wraps a
// failure as "ARGV: CAUSE: STDERR".
func Run(ctx context.Context, runner Runner, timeout time.Duration, argv []string, stdin []byte) ([]byte, error) {
	if runner == nil {
		runner = Exec
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, errOut, err := runner(ctx, argv, stdin)
	if err == nil {
		return out, nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	msg := strings.TrimSpace(string(errOut))
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	if msg != "" {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return out, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
}

// ExitCode is the exit status of a command that ran and exited, else -1.
func ExitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return exit.ExitCode()
	}
	return -1
}

// capped keeps the first n bytes written and drops the rest.
type capped struct {
	b bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
