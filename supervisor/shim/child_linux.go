package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childResult is how the child ended, as seen by its waiter.
type childResult struct {
	state *os.ProcessState
	err   error
}

// startChild starts cmd in its own process group with SIGKILL as its
// parent-death signal and, if shield, with SIGTERM blocked, and waits for it
// on the same locked OS thread: Linux delivers the parent-death signal when
// the thread that forked exits, so that thread must outlive the child.
// It returns the child's PID once started; the result arrives on done.
//
// Why SIGTERM is blocked: Slurm signals every process of a step (any process
// group, any session) at preemption, cancellation and requeue, so a child
// that merely runs under the shim would get the same SIGTERM. A blocked
// signal stays pending and a signal mask survives exec, so the child never
// sees it unless it unblocks SIGTERM itself; llama-server and rpc-server do
// not. The shim stops the child with another signal (SIGINT by default).
func startChild(cmd *exec.Cmd, shield bool, done chan<- childResult) (int, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread's signal mask was changed, so it
		// ends with this goroutine instead of going back to the pool.
		if err := startShielded(cmd, shield); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		done <- childResult{state: cmd.ProcessState, err: waitError(err)}
	}()
	if err := <-started; err != nil {
		return 0, err
	}
	return cmd.Process.Pid, nil
}

// startShielded starts cmd with SIGTERM blocked in the calling (locked)
// thread, so the child inherits the mask, and restores the mask after.
func startShielded(cmd *exec.Cmd, shield bool) error {
	if !shield {
		return cmd.Start()
	}
	var set, old unix.Sigset_t
	sigaddset(&set, unix.SIGTERM)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return fmt.Errorf("block SIGTERM for child: %w", err)
	}
	err := cmd.Start()
	if rerr := unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil); rerr != nil && err == nil {
		err = fmt.Errorf("restore signal mask: %w", rerr)
	}
	return err
}

// sigaddset adds sig to set (x/sys/unix has no helper for it).
func sigaddset(set *unix.Sigset_t, sig syscall.Signal) {
	n := uint(sig) - 1
	set.Val[n/64] |= 1 << (n % 64)
}

// waitError keeps only errors that say something beyond the exit status.
func waitError(err error) error {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return nil
	}
	return err
}

// signalGroup sends sig to the process group led by pid; a group already
// gone is not an error.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d with %v: %w", pid, sig, err)
	}
	return nil
}

// exitStatus is the shell's view of how a process ended: its exit code,
// or 128+signal; the code is -1 and sig set when a signal ended it.
func exitStatus(state *os.ProcessState) (status, code int, sig string) {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), -1, signalName(ws.Signal())
	}
	return state.ExitCode(), state.ExitCode(), ""
}

// signalName is the conventional name of sig ("SIGTERM"), or "SIG<n>".
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("SIG%d", int(sig))
}
