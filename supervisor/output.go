package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"slurm-llm/supervisor/shim"
)

// maxLine bounds a line kept for scanning; longer output is cut into pieces.
const maxLine = 64 << 10

var (
	// srunTaskRE matches srun's report of how a task ended:
	// "srun: error: node2: task 0: Killed", "…: task 0: Exited with exit code 3".
	srunTaskRE = regexp.MustCompile(`^srun: error: \S+: tasks? [0-9,-]+: (.+)$`)
	// stepIDRE finds the step id that srun -v prints ("launching StepId=12.3 on host node2").
	stepIDRE = regexp.MustCompile(`launching StepId=([0-9]+(?:_[0-9]+)?\.[0-9]+)`)
	// unreachableRE finds a head's report of a worker it could not connect
	// to: real llama-server logs "E Failed to connect to H:P", then loads and
	// serves without that worker (measured: notes Q2).
	unreachableRE = regexp.MustCompile(`Failed to connect to (\S+:[0-9]+)`)
	// stepRefusedRE finds srun's report that Slurm would not create the
	// step, so the task never ran: "srun: error: Unable to create step for
	// job 496: Requested node configuration is not available"
	// (scripts/FACTS-cluster.md N6).
	stepRefusedRE = regexp.MustCompile(`Unable to create step for job [0-9_]+: (.+)$`)
)

// watch scans a process's output lines for what the supervisor must know:
// the ready pattern, an oom-kill report, srun's task status and step id,
// and the shim's account of how its child ended. Its facts are guarded by
// mu: lines arrive on exec's copying goroutine.
type watch struct {
	pattern   string
	token     string
	ready     chan struct{}
	readyOnce sync.Once
	// listening closes when the process itself holds its port (the shim's
	// marker, or LocalLauncher's own look).
	listening  chan struct{}
	listenOnce sync.Once
	// unreachable gets each worker address the process said it could not
	// connect to (a head); a full channel drops the report.
	unreachable chan string

	mu sync.Mutex
	f  facts
}

// facts are what a process's output said about it.
type facts struct {
	oom        bool
	taskStatus string
	stepID     string
	// stepRefused is Slurm's reason for not creating the step ("" when srun did not say).
	stepRefused string
	// childSignal is the signal that ended the shim's child (0: none or no shim).
	childSignal syscall.Signal
	// portBusy says who held the process's port when the shim refused to
	// start it ("" when it did not).
	portBusy string
}

func newWatch(pattern, token string) *watch {
	return &watch{pattern: pattern, token: token, ready: make(chan struct{}), listening: make(chan struct{}),
		unreachable: make(chan string, 16)}
}

// markListening records that the process holds its port.
func (w *watch) markListening() { w.listenOnce.Do(func() { close(w.listening) }) }

// line looks at one line of output.
func (w *watch) line(s string) {
	if w.pattern != "" && strings.Contains(s, w.pattern) {
		w.readyOnce.Do(func() { close(w.ready) })
	}
	if w.token != "" && strings.HasPrefix(s, shim.MarkerPrefix) {
		w.shimMarker(s)
		return
	}
	if m := unreachableRE.FindStringSubmatch(s); m != nil {
		select {
		case w.unreachable <- m[1]:
		default:
		}
		return
	}
	if !strings.HasPrefix(s, "srun") && !strings.HasPrefix(s, "slurmstepd") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(s, "oom-kill") || strings.Contains(s, "oom_kill") || strings.Contains(s, "Out Of Memory") {
		w.f.oom = true
	}
	if m := srunTaskRE.FindStringSubmatch(s); m != nil {
		w.f.taskStatus = m[1]
	}
	if m := stepIDRE.FindStringSubmatch(s); m != nil && w.f.stepID == "" {
		w.f.stepID = m[1]
	}
	if m := stepRefusedRE.FindStringSubmatch(s); m != nil {
		w.f.stepRefused = m[1]
	}
}

// shimMarker takes what the shim reports about its child: that it holds
// its port, that the port was held by another process, and the signal that
// ended it (through the shim, srun only sees an exit status, 128+signal).
func (w *watch) shimMarker(s string) {
	ev, ok := shim.ParseMarker(s, w.token)
	if !ok {
		return
	}
	switch {
	case ev.Kind == shim.EventListening:
		w.markListening()
	case ev.Kind == shim.EventPortBusy:
		w.mu.Lock()
		w.f.portBusy = fmt.Sprintf("port %d was held by %s", ev.Port, holderName(ev.Holder))
		w.mu.Unlock()
	case ev.Kind == shim.EventExited && ev.Signal != "":
		w.mu.Lock()
		w.f.childSignal = unix.SignalNum(ev.Signal)
		w.mu.Unlock()
	}
}

// holderName names a port's holder from the shim's marker (pid 0: not visible).
func holderName(pid int) string {
	if pid == 0 {
		return "a process the job cannot see"
	}
	return fmt.Sprintf("pid %d on the node", pid)
}

// facts returns what was seen so far.
func (w *watch) facts() facts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f
}

// lineWriter is the io.Writer a process's stdout and stderr go to: it
// appends everything to the log file and hands each complete line to fn.
// exec.Cmd calls Write from one goroutine per stream; mu orders them.
type lineWriter struct {
	mu      sync.Mutex
	file    *os.File
	partial []byte
	fn      func(string)
}

// Write implements io.Writer. A failing log file does not fail the process:
// the line scan goes on and the write error is dropped.
func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.file.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.fn(strings.TrimRight(string(w.partial[:i]), "\r"))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > maxLine {
		w.fn(string(w.partial))
		w.partial = w.partial[:0]
	}
	return len(b), nil
}

// flush hands a last unterminated line to fn.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.fn(string(w.partial))
		w.partial = nil
	}
}
