package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DefaultTimeout bounds one Slurm command when Client.Timeout is zero. A
// client retries an unreachable controller for 9 to 18 s before it fails
// (measured), so this cuts that short and reports ErrUnavailable.
const DefaultTimeout = 10 * time.Second

// ErrNoSuchJob means Slurm answered that the job (or step) does not exist:
// "Invalid job id specified".
var ErrNoSuchJob = errors.New("no such job")

// ErrUnavailable means Slurm did not answer: the controller could not be
// reached, the command timed out or was cancelled, or the binary is missing.
// It never means the job is gone.
var ErrUnavailable = errors.New("slurm controller unavailable")

// Runner runs argv and returns what it printed. err is an *exec.ExitError
// when the command ran and failed, anything else when it could not run.
// Tests inject one; nil means run the real command.
type Runner func(ctx context.Context, argv []string) (stdout, stderr []byte, err error)

// Client runs Slurm's commands with a timeout. The zero value works: it runs
// scontrol, squeue, sbatch and scancel from PATH with DefaultTimeout, in
// this process's environment as CommandEnv makes it (SLURM_TIME_FORMAT
// standard, the output-changing variables dropped).
type Client struct {
	// Scontrol, Squeue, Sbatch and Scancel name the binaries; "" means the
	// plain name, looked up in PATH.
	Scontrol, Squeue, Sbatch, Scancel string
	// Timeout bounds each command; 0 means DefaultTimeout.
	Timeout time.Duration
	// Run runs the commands; nil means exec them.
	Run Runner
	// Location is the zone Slurm prints times in; nil means time.Local.
	Location *time.Location
	// User, when set, limits JobsByName to that user's jobs (squeue -u), so
	// another user's job of the same name is never taken for a tier's job.
	// "" lists every user's jobs.
	User string
}

// CommandError is a Slurm command that failed. It wraps ErrNoSuchJob or
// ErrUnavailable when the failure is one of those, and the underlying cause.
// A CommandError that wraps neither means Slurm answered and refused.
type CommandError struct {
	Argv   []string // the command that failed
	Stderr string   // what it printed on stderr, trimmed
	Kind   error    // ErrNoSuchJob, ErrUnavailable or nil
	Err    error    // the cause: an *exec.ExitError, a context error, …
}

// Error reads "ARGV: KIND: CAUSE: STDERR", leaving out what is empty.
func (e *CommandError) Error() string {
	msg := strings.Join(e.Argv, " ") + ": "
	if e.Kind != nil {
		msg += e.Kind.Error() + ": "
	}
	msg += e.Err.Error()
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// Unwrap gives errors.Is both the kind and the cause.
func (e *CommandError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

func orDefault(path, name string) string {
	if path == "" {
		return name
	}
	return path
}

func (c *Client) scontrol() string { return orDefault(c.Scontrol, "scontrol") }
func (c *Client) squeue() string   { return orDefault(c.Squeue, "squeue") }
func (c *Client) sbatch() string   { return orDefault(c.Sbatch, "sbatch") }
func (c *Client) scancel() string  { return orDefault(c.Scancel, "scancel") }

func (c *Client) location() *time.Location {
	if c.Location == nil {
		return time.Local
	}
	return c.Location
}

// run runs argv under the client's timeout and classifies a failure.
func (c *Client) run(ctx context.Context, argv ...string) (string, error) {
	out, _, err := c.runBoth(ctx, argv...)
	return out, err
}

// runBoth is run that also returns what a command that succeeded printed
// on stderr (sbatch --test-only answers there).
func (c *Client) runBoth(ctx context.Context, argv ...string) (string, string, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	runner := c.Run
	if runner == nil {
		runner = execRunner
	}
	stdout, stderr, err := runner(ctx, argv)
	if err == nil {
		return string(stdout), string(stderr), nil
	}
	return "", "", classify(ctx, argv, strings.TrimSpace(string(stderr)), err)
}

// unavailableMarks are what Slurm's clients print when the controller did not
// answer (seen on 22.05 with the controller unreachable).
var unavailableMarks = []string{
	"Unable to contact slurm controller",
	"Socket timed out",
	"Unexpected message received",
	"Zero Bytes were transmitted",
	"Communication connection failure",
	"Connection refused",
	"Slurm backup controller in standby mode",
}

func classify(ctx context.Context, argv []string, stderr string, err error) error {
	e := &CommandError{Argv: argv, Stderr: stderr, Err: err}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		e.Kind, e.Err = ErrUnavailable, fmt.Errorf("%w (%v)", ctx.Err(), err)
	case !errors.As(err, &exit), !exit.Exited():
		e.Kind = ErrUnavailable // could not run, or killed by a signal
	case containsAny(stderr, unavailableMarks):
		e.Kind = ErrUnavailable
	case strings.Contains(stderr, "Invalid job id specified"):
		e.Kind = ErrNoSuchJob
	}
	return e
}

func containsAny(s string, marks []string) bool {
	for _, m := range marks {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func execRunner(ctx context.Context, argv []string) ([]byte, []byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = CommandEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}
