package shim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slurm-llm/health"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults for Config's zero durations and signal.
const (
	DefaultHold       = 20 * time.Second
	DefaultGrace      = 5 * time.Second
	DefaultStopSignal = syscall.SIGINT
)

// BlockedEnv is set to "1" in a shielded child's environment: its SIGTERM
// is blocked on purpose. C++ programs keep the mask and need not look; a Go
// child cannot see its initial mask (the Go runtime unblocks SIGTERM before
// main) and reads this instead (cmd/fake-llama).
const BlockedEnv = "SLURM_LLM_SIGTERM_BLOCKED"

// Config is one run of the shim around one child.
type Config struct {
	// Argv is the child's command line; Argv[0] is looked up in PATH.
	Argv []string
	// Token marks this run's markers; the supervisor passes a fresh one
	// (NewToken) per step. Required.
	Token string
	// Hold is how long the child is kept running after the first stop
	// signal when no command comes; zero means DefaultHold, negative
	// means no hold (stop at once).
	Hold time.Duration
	// Grace is how long the child has after StopSignal before SIGKILL;
	// zero means DefaultGrace.
	Grace time.Duration
	// StopSignal is what the shim sends the child's process group to stop
	// it; zero means SIGINT (SIGTERM is blocked in a shielded child).
	StopSignal syscall.Signal
	// Unshielded starts the child without SIGTERM blocked, so Slurm's
	// SIGTERM reaches it too. The zero value (shielded) is what a step wants.
	Unshielded bool
	// Stdin carries the supervisor's commands, one per line. Its end means
	// nobody can send "stop" any more. The child's stdin is /dev/null.
	Stdin io.Reader
	// Stdout receives the child's stdout (an *os.File is handed to the child
	// directly). Stderr receives the child's stderr, the markers and the
	// shim's log; wrap it in a LineWriter shared with Logger.
	Stdout io.Writer
	Stderr *LineWriter
	// Signals are the stop signals the shim itself receives (caught in
	// cmd/): SIGTERM from Slurm, SIGINT from srun.
	Signals <-chan os.Signal
	// Port, when set, is the TCP port the child will listen on: if another
	// process holds it already, the child is not started (EventPortBusy,
	// exit status PortBusyStatus); once the child holds it, EventListening
	// says so.
	Port int
	// LeaseUntil, when set, is when the child's lease ends unless the
	// supervisor renews it ("lease T" on stdin, T an absolute time on this
	// node's clock): at T the child is killed at once (SIGKILL to its
	// group). An elastic tier's leader leases its head so, until its lead
	// ends (elastic.Timing.LeadEnd): a leader whose supervisor is frozen
	// (SIGSTOP) or whose member-file write hangs cannot stop its head
	// before the next leader may start one; the shim, on the head's node
	// (the leader's own: the same clock), does it instead. The deadline is
	// absolute so that no hop on its way (the supervisor's goroutines,
	// srun's stdin) can lengthen it. Zero: no lease.
	LeaseUntil time.Time
	// Now stamps the markers; nil means time.Now.
	Now    func() time.Time
	Logger hclog.Logger
}

// PortBusyStatus is the shim's exit status when the child's port was held
// by another process (EADDRINUSE's number).
const PortBusyStatus = 98

// listenPoll is how often the shim looks for its child's listening socket.
const listenPoll = 100 * time.Millisecond

// withDefaults fills the zero values documented on Config.
func (c Config) withDefaults() Config {
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.StopSignal == 0 {
		c.StopSignal = DefaultStopSignal
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// validate reports what makes c unusable.
func (c Config) validate() error {
	switch {
	case len(c.Argv) == 0 || c.Argv[0] == "":
		return errors.New("shim: no command to run")
	case !validToken(c.Token):
		return fmt.Errorf("shim: token %q is empty or has spaces, '=' or unprintable characters", c.Token)
	case c.Stdin == nil || c.Stdout == nil || c.Stderr == nil || c.Signals == nil:
		return errors.New("shim: Stdin, Stdout, Stderr and Signals are required")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("shim: port %d out of range", c.Port)
	}
	return nil
}

// Run starts the child, holds it through stop signals until told to stop,
// and returns the child's exit status (its code, or 128+signal), which the
// shim's process should exit with. A child that cannot start gives 127 (not
// found) or 126.
func Run(cfg Config) int {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		cfg.Logger.Error("invalid shim config", "error", err)
		return 2
	}
	if !cfg.Unshielded && cfg.StopSignal == syscall.SIGTERM {
		cfg.Logger.Warn("stop signal SIGTERM is blocked in a shielded child: stopping it will take the grace and SIGKILL")
	}
	h := &holder{cfg: cfg, log: cfg.Logger}
	return h.run()
}

// holder is one shim run; only the goroutine in run() touches its fields.
type holder struct {
	cfg      Config
	log      hclog.Logger
	pid      int
	signals  int
	stopping bool
	reason   string
	eof      bool
	hold     *time.Timer
	grace    *time.Timer
	// lease wakes the loop to check the lease's end, leaseEnd
	// (Config.LeaseUntil, then each renewal); nil without a lease.
	lease    *time.Timer
	leaseEnd time.Time
}

// leaseCheck bounds how long the lease timer sleeps: the deadline is on
// the wall clock, a timer on the monotonic one, so a clock step (NTP) is
// seen within this.
const leaseCheck = time.Second

func (r *holder) run() int {
	if status, busy := r.portBusy(); busy {
		return status
	}
	cmd := exec.Command(r.cfg.Argv[0], r.cfg.Argv[1:]...)
	cmd.Stdout = r.cfg.Stdout
	cmd.Stderr = r.cfg.Stderr
	if !r.cfg.Unshielded {
		cmd.Env = append(os.Environ(), BlockedEnv+"=1")
	}
	done := make(chan childResult, 1)
	pid, err := startChild(cmd, !r.cfg.Unshielded, done)
	if err != nil {
		return r.startFailed(err)
	}
	r.pid = pid
	r.mark(Event{Kind: EventStarted})
	if !r.cfg.LeaseUntil.IsZero() {
		r.leaseEnd = r.cfg.LeaseUntil
		r.lease = time.NewTimer(r.untilCheck())
		defer func() { r.lease.Stop() }()
	}
	quit := make(chan struct{})
	defer close(quit)
	return r.loop(done, readCommands(r.cfg.Stdin, quit), r.watchListening(quit))
}

// portBusy refuses to start the child when another process holds its
// port: a server already answering there (a stale head, another tier)
// would otherwise pass for this one.
func (r *holder) portBusy() (int, bool) {
	if r.cfg.Port == 0 {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	holders, err := health.PortHolders(ctx, r.cfg.Port)
	if err != nil {
		r.log.Warn("cannot check the port before start", "port", r.cfg.Port, "error", err)
		return 0, false
	}
	if len(holders) == 0 {
		return 0, false
	}
	r.log.Error("port already in use: not starting a second server on it", "port", r.cfg.Port, "held_by", holders[0].String())
	r.mark(Event{Kind: EventPortBusy, Port: r.cfg.Port, Holder: holders[0].PID})
	r.mark(Event{Kind: EventExited, Reason: ReasonPortBusy, ExitCode: -1, Status: PortBusyStatus})
	return PortBusyStatus, true
}

// watchListening looks for the child's listening socket on its port until
// it is there (the channel then gets the port and closes) or quit closes.
// Without a port the channel is nil: never ready.
func (r *holder) watchListening(quit <-chan struct{}) <-chan int {
	if r.cfg.Port == 0 {
		return nil
	}
	out := make(chan int, 1)
	pid, port := r.pid, r.cfg.Port
	go func() {
		defer close(out)
		t := time.NewTicker(listenPoll)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ok, _ := health.Holds(ctx, pid, port)
			cancel()
			if ok {
				out <- port
				return
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// loop is the shim's single owner of state: signals, commands, timers and
// the child's end, until the child has ended.
func (r *holder) loop(done <-chan childResult, cmds <-chan string, listening <-chan int) int {
	for {
		select {
		case port, ok := <-listening:
			listening = nil
			if ok {
				r.mark(Event{Kind: EventListening, Port: port})
			}
		case sig := <-r.cfg.Signals:
			r.handleSignal(sig)
		case line, ok := <-cmds:
			if !ok {
				cmds = nil
				r.handleStdinClosed()
				continue
			}
			r.handleCommand(line)
		case <-timerC(r.hold):
			r.hold = nil
			r.stop(ReasonHold)
		case <-timerC(r.grace):
			r.grace = nil
			r.kill(ReasonGrace)
		case <-timerC(r.lease):
			r.checkLease()
		case res := <-done:
			return r.handleExit(res)
		}
	}
}

// timerC is t's channel, or nil (never ready) when t is not armed.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// handleSignal reports a stop signal at once and starts the hold on the
// first one; later ones are reported but change nothing: when to stop is
// the supervisor's call.
func (r *holder) handleSignal(sig os.Signal) {
	r.signals++
	name := sig.String()
	if s, ok := sig.(syscall.Signal); ok {
		name = signalName(s)
	}
	r.mark(Event{Kind: EventSignal, Signal: name, Count: r.signals})
	if r.signals > 1 || r.stopping {
		return
	}
	switch {
	case r.eof:
		r.stop(ReasonStdinClosed)
	case r.cfg.Hold < 0:
		r.stop(ReasonHold)
	default:
		r.hold = time.NewTimer(r.cfg.Hold)
	}
}

// handleCommand carries out one line from the supervisor.
func (r *holder) handleCommand(line string) {
	if arg, ok := strings.CutPrefix(line, CommandLease+" "); ok {
		r.renew(arg)
		return
	}
	switch line {
	case CommandStop:
		r.stop(ReasonStop)
	case CommandStopNow:
		r.kill(ReasonStopNow)
	case "":
	default:
		r.log.Warn("unknown command ignored", "command", line)
	}
}

// untilCheck is how long the lease timer sleeps before it looks at the
// lease's end again.
func (r *holder) untilCheck() time.Duration {
	return min(max(r.leaseEnd.Sub(r.cfg.Now()), 0), leaseCheck)
}

// checkLease kills the child once its lease has ended, or sleeps again.
func (r *holder) checkLease() {
	if r.stopping {
		return // already on its way out: the lease has nothing to add
	}
	if now := r.cfg.Now(); now.Before(r.leaseEnd) {
		r.lease.Reset(r.untilCheck())
		return
	}
	r.log.Error("the supervisor did not renew the lease in time: killing the child",
		"lease_until", r.leaseEnd.UTC().Format(time.RFC3339Nano))
	r.kill(ReasonLease)
}

// renew moves the lease's end to the time arg names. A lease not armed (no
// LeaseUntil) stays off: renewals cannot start one the child was not
// given.
func (r *holder) renew(arg string) {
	until, err := time.Parse(time.RFC3339Nano, arg)
	if err != nil {
		r.log.Warn("bad lease command ignored", "lease", arg)
		return
	}
	if r.lease == nil || r.stopping {
		return
	}
	r.leaseEnd = until
	if !r.lease.Stop() {
		select {
		case <-r.lease.C:
		default:
		}
	}
	r.lease.Reset(r.untilCheck())
}

// handleStdinClosed: nobody can send "stop" any more, so a child already
// held is stopped now, and a later stop signal stops it at once.
func (r *holder) handleStdinClosed() {
	r.eof = true
	r.mark(Event{Kind: EventStdinClosed})
	if r.signals > 0 && !r.stopping {
		r.stop(ReasonStdinClosed)
	}
}

// stop sends the stop signal to the child's group and starts the grace.
// Stopping twice does nothing; kill escalates.
func (r *holder) stop(reason string) {
	if r.stopping {
		return
	}
	r.stopping, r.reason = true, reason
	if r.hold != nil {
		r.hold.Stop()
		r.hold = nil
	}
	r.mark(Event{Kind: EventStopping, Signal: signalName(r.cfg.StopSignal), Reason: reason})
	if err := signalGroup(r.pid, r.cfg.StopSignal); err != nil {
		r.log.Error("stop child", "error", err)
	}
	r.grace = time.NewTimer(r.cfg.Grace)
}

// kill sends SIGKILL to the child's group.
func (r *holder) kill(reason string) {
	if !r.stopping {
		r.stopping, r.reason = true, reason
	}
	if r.hold != nil {
		r.hold.Stop()
		r.hold = nil
	}
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	r.mark(Event{Kind: EventStopping, Signal: "SIGKILL", Reason: reason})
	if err := signalGroup(r.pid, syscall.SIGKILL); err != nil {
		r.log.Error("kill child", "error", err)
	}
}

// handleExit reports how the child ended and returns the shim's status.
// What is left of the child's process group is killed: nothing of the
// child outlives the shim.
func (r *holder) handleExit(res childResult) int {
	if err := signalGroup(r.pid, syscall.SIGKILL); err != nil {
		r.log.Warn("kill rest of child's group", "error", err)
	}
	if res.err != nil {
		r.log.Warn("wait for child", "error", res.err)
	}
	status, code, sig := exitStatus(res.state)
	reason := r.reason
	if reason == "" {
		reason = ReasonExited
	}
	r.mark(Event{Kind: EventExited, Signal: sig, Reason: reason, ExitCode: code, Status: status})
	return status
}

// startFailed reports a child that never ran and returns its status.
func (r *holder) startFailed(err error) int {
	status := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		status = 127
	}
	r.log.Error("start child", "command", r.cfg.Argv[0], "error", err)
	r.mark(Event{Kind: EventExited, Reason: ReasonStartFailed, ExitCode: -1, Status: status})
	return status
}

// mark writes ev as a marker line on stderr, at the start of a line.
func (r *holder) mark(ev Event) {
	ev.Time = r.cfg.Now()
	ev.ShimPID = os.Getpid()
	if ev.ChildPID == 0 {
		ev.ChildPID = r.pid
	}
	if err := r.cfg.Stderr.WriteLine(FormatMarker(r.cfg.Token, ev)); err != nil {
		r.log.Error("write marker", "event", ev.Kind, "error", err)
	}
}

// readCommands sends each line of in (trimmed) until in ends, then closes
// the channel. It stops early when quit closes.
func readCommands(in io.Reader, quit <-chan struct{}) <-chan string {
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case cmds <- strings.TrimSpace(sc.Text()):
			case <-quit:
				return
			}
		}
	}()
	return cmds
}
