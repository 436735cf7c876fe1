package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slurm-llm/supervisor/tier"
	"strings"
	"sync"
	"syscall"
	"time"
)

// waitDelay bounds how long Wait waits for output pipes once the process
// has exited (a grandchild may hold them open).
const waitDelay = 2 * time.Second

// proc is the Handle both launchers return: a local process in its own
// process group whose output goes through a lineWriter into a watch.
type proc struct {
	cmd   *exec.Cmd
	name  string
	watch *watch
	out   *lineWriter
	done  chan struct{}

	// term asks for a graceful end; kill ends it for sure. Both default to
	// signalling the process group; SrunLauncher routes them through Slurm.
	term func(p *proc)
	kill func(p *proc)
	// extraGrace is added to the stop grace (a shim runs its own grace first).
	extraGrace time.Duration
	// onExit, if set, runs once the process is reaped (closes its stdin pipe).
	onExit func()
	// renew, if set, renews the process's lease (a shimmed step's).
	renew func(until time.Time)

	mu     sync.Mutex
	result ExitResult
}

// startProc starts cmd for process spec in its own process group, with its
// output appended to spec.LogPath, and waits for it in a goroutine.
// onLine, if set, also sees every output line (on exec's copying goroutine);
// token, if set, is the shim's marker token, whose exit marker names the
// child's signal. setup, if set, adjusts the proc (term, kill, onExit)
// before the process starts, so the waiting goroutine never races it.
func startProc(cmd *exec.Cmd, spec tier.Process, onLine func(tier.Process, string), token string, setup func(*proc)) (*proc, error) {
	f, err := openLog(spec.LogPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &proc{cmd: cmd, name: spec.Name, watch: newWatch(spec.ReadyPattern, token), done: make(chan struct{})}
	p.term = func(p *proc) { p.signalGroup(syscall.SIGTERM) }
	p.kill = func(p *proc) { p.signalGroup(syscall.SIGKILL) }
	p.out = &lineWriter{file: f, fn: p.watch.line}
	if onLine != nil {
		p.out.fn = func(line string) {
			p.watch.line(line)
			onLine(spec, line)
		}
	}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	if setup != nil {
		setup(p)
	}
	fmt.Fprintf(f, "--- llm-supervisor %s: start %s: %s\n", time.Now().Format(time.RFC3339Nano), spec.Name, strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(f, "--- llm-supervisor: start failed: %v\n", err)
		f.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	go p.wait(f)
	return p, nil
}

// openLog opens a process's log file for appending, creating its directory.
func openLog(path string) (*os.File, error) {
	if path == "" {
		return nil, errors.New("no log path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

// wait reaps the process, records how it ended and closes done.
func (p *proc) wait(f *os.File) {
	err := p.cmd.Wait()
	p.out.flush()
	r := exitResult(p.cmd.ProcessState, err)
	f2 := p.watch.facts()
	r.OOM, r.TaskStatus, r.PortBusy, r.StepRefused = f2.oom, f2.taskStatus, f2.portBusy, f2.stepRefused
	if r.Signal == 0 {
		r.Signal = f2.childSignal
	}
	r = srunSignal(r)
	fmt.Fprintf(f, "--- llm-supervisor %s: %s ended: %s\n", time.Now().Format(time.RFC3339Nano), p.name, r)
	f.Close()
	if p.onExit != nil {
		p.onExit()
	}
	p.mu.Lock()
	p.result = r
	p.mu.Unlock()
	close(p.done)
}

// exitResult reads the exit code or signal from a finished process.
func exitResult(ps *os.ProcessState, err error) ExitResult {
	if ps == nil {
		return ExitResult{Code: -1, Err: err}
	}
	r := ExitResult{Code: ps.ExitCode()}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.Signal = ws.Signal()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		r.Err = err
	}
	return r
}

// srunSignal fills in the signal of a task that srun reports as killed by
// one: srun then exits with 128+signal ("task 0: Killed", status 137).
func srunSignal(r ExitResult) ExitResult {
	if r.Signal == 0 && r.TaskStatus != "" && !strings.HasPrefix(r.TaskStatus, "Exited") && r.Code > 128 && r.Code < 128+65 {
		r.Signal = syscall.Signal(r.Code - 128)
	}
	return r
}

// PID implements Handle.
func (p *proc) PID() int { return p.cmd.Process.Pid }

// Ready implements Handle.
func (p *proc) Ready() <-chan struct{} { return p.watch.ready }

// Unreachable implements Handle.
func (p *proc) Unreachable() <-chan string { return p.watch.unreachable }

// Listening implements Handle.
func (p *proc) Listening() <-chan struct{} { return p.watch.listening }

// Done implements Handle.
func (p *proc) Done() <-chan struct{} { return p.done }

// Result implements Handle.
func (p *proc) Result() ExitResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.result
}

// exited reports whether the process is gone (and its pid may be reused).
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group, unless the process was reaped.
func (p *proc) signalGroup(sig syscall.Signal) {
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// Stop implements Handle: term, up to grace, then kill, then wait.
func (p *proc) Stop(grace time.Duration) {
	if p.exited() {
		return
	}
	p.term(p)
	t := time.NewTimer(grace + p.extraGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	p.Kill()
}

// Kill implements Handle.
func (p *proc) Kill() {
	p.kill(p)
	<-p.done
}

// Lease renews the process's lease until the time until (Leaser); false
// when it has none to renew (not a shimmed step).
func (p *proc) Lease(until time.Time) bool {
	if p.renew == nil {
		return false
	}
	p.renew(until)
	return true
}
