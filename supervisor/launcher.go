package supervisor

import (
	"fmt"
	"slurm-llm/supervisor/tier"
	"strings"
	"syscall"
	"time"
)

// Launcher starts the processes of a tier. SrunLauncher starts each as its
// own Slurm job step; LocalLauncher runs them on this machine (tests, and
// trying a config without Slurm).
type Launcher interface {
	// Start launches p and returns at once with a handle on the running
	// process. Its output (stdout and stderr) goes to p.LogPath.
	Start(p tier.Process) (Handle, error)
}

// Handle is one started process (for SrunLauncher: the srun client that
// runs its step). All methods are safe for concurrent use.
type Handle interface {
	// PID is the process id of the local process (the srun client).
	PID() int
	// Ready is closed when the output showed tier.Process.ReadyPattern; it is never
	// closed when the pattern is empty.
	Ready() <-chan struct{}
	// Listening is closed once the process itself holds a socket listening
	// on Process.Port: whatever answers there is this process, not a stale
	// server or another tier's. Never closed when Port is 0.
	Listening() <-chan struct{}
	// Unreachable delivers each worker address (host:port) the process
	// reported it could not connect to: a llama-server head then serves
	// without that worker.
	Unreachable() <-chan string
	// Done is closed when the process has exited and Result is known.
	Done() <-chan struct{}
	// Result says how the process ended; valid once Done is closed.
	Result() ExitResult
	// Stop asks the process to end (SIGTERM), waits up to grace, then kills
	// it. It returns when the process is gone.
	Stop(grace time.Duration)
	// Kill ends the process at once.
	Kill()
}

// Leaser is a Handle whose process runs under a lease
// (tier.Process.LeaseUntil): Lease renews it until the time until, and
// reports false when the process has no lease to renew.
type Leaser interface {
	Lease(until time.Time) bool
}

// ExitResult says how a process ended, in the words an operator needs.
// The zero value is a clean exit with code 0.
type ExitResult struct {
	// Code is the exit status; -1 when the local process was killed by a signal.
	Code int
	// Signal is the signal that ended the process or, through srun, its task (0: none).
	Signal syscall.Signal
	// OOM is set when Slurm reported an oom-kill event for the step.
	OOM bool
	// TaskStatus is srun's own account of how the task ended
	// ("Killed", "Exited with exit code 3"); empty without srun.
	TaskStatus string
	// PortBusy, when set, says who held the process's port, so that it was
	// not started ("port 8080 was held by pid 4242 on the node").
	PortBusy string
	// StepRefused, when set, is srun's reason why Slurm did not create the
	// process's step ("Requested node configuration is not available"):
	// the process never ran.
	StepRefused string
	// Err is set when the process could not be run or waited for.
	Err error
}

// String reads like "exit code 137 (signal killed), killed for memory".
func (r ExitResult) String() string {
	var parts []string
	switch {
	case r.Err != nil:
		parts = append(parts, "error: "+r.Err.Error())
	case r.Code >= 0 && r.Signal != 0:
		parts = append(parts, fmt.Sprintf("exit code %d (signal %s)", r.Code, r.Signal))
	case r.Signal != 0:
		parts = append(parts, "signal "+r.Signal.String())
	default:
		parts = append(parts, fmt.Sprintf("exit code %d", r.Code))
	}
	if r.TaskStatus != "" {
		parts = append(parts, "srun: task "+r.TaskStatus)
	}
	if r.OOM {
		parts = append(parts, "killed for memory (oom-kill)")
	}
	if r.PortBusy != "" {
		parts = append(parts, "not started: "+r.PortBusy)
	}
	if r.StepRefused != "" {
		parts = append(parts, "Slurm refused the step: "+r.StepRefused)
	}
	return strings.Join(parts, ", ")
}
