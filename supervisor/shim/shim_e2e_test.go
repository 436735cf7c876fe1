//go:build e2e

package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The e2e tests run a real job on the local cluster (scripts/slurm-cluster.sh
// up): its batch script is this test binary as "batch", which starts one
// step `srun … <test binary as shim> -- sleep 1000`, reads the step's stderr
// as the supervisor would, and logs every line with the time it got it to
// <dir>/log.jsonl. The test provokes Slurm's stop (preemption, scancel),
// checks that the batch side sees the marker while the child still runs,
// then asks for the stop by creating <dir>/stop.

func init() { helpers["batch"] = helperBatch }

// logLine is one line the batch side saw, with when it saw it.
type logLine struct {
	T    time.Time `json:"t"`
	Src  string    `json:"src"` // "stderr", "stdout", "batch"
	Line string    `json:"line"`
}

// helperBatch plays the supervisor's part inside the job.
func helperBatch() int {
	dir := os.Getenv("SHIM_TEST_DIR")
	f, err := os.OpenFile(filepath.Join(dir, "log.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 1
	}
	var mu sync.Mutex
	enc := json.NewEncoder(f)
	record := func(src, line string) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(logLine{T: time.Now(), Src: src, Line: line})
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGCONT)
	term := make(chan struct{}, 1)
	go func() {
		for s := range sigs {
			record("batch", "signal "+s.String())
			if s == syscall.SIGTERM {
				select {
				case term <- struct{}{}:
				default:
				}
			}
		}
	}()
	self, _ := os.Executable()
	cmd := exec.Command("srun", "-N1", "-n1", "--overlap", self, "-test.run=^$", "--", "sleep", "1000")
	cmd.Env = append(os.Environ(), "SHIM_TEST_HELPER=shim", "SHIM_TEST_HOLD=25s")
	stdin, _ := cmd.StdinPipe()
	stderr, _ := cmd.StderrPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		record("batch", "srun start: "+err.Error())
		return 1
	}
	var wg sync.WaitGroup
	for src, r := range map[string]io.Reader{"stderr": stderr, "stdout": stdout} {
		wg.Add(1)
		go func(src string, r io.Reader) {
			defer wg.Done()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				record(src, sc.Text())
			}
		}(src, r)
	}
	exited := make(chan error, 1)
	go func() { wg.Wait(); exited <- cmd.Wait() }()
	return batchLoop(dir, cmd.Process, stdin, exited, term, record)
}

// batchLoop forwards <dir>/stop and <dir>/stop-now to the step's stdin,
// closes it on <dir>/close-stdin, kills the srun client on <dir>/kill-srun.
// Like the supervisor it does not exit when its step ends (a preempted
// batch script that exits early ends the job COMPLETED): it exits once it
// has had SIGTERM and its step has ended, or after `scontrol requeue` of
// its job on <dir>/requeue.
func batchLoop(dir string, srun *os.Process, stdin io.WriteCloser, exited <-chan error,
	term <-chan struct{}, record func(string, string)) int {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	stepDone, termed := false, false
	for !stepDone || !termed {
		select {
		case err := <-exited:
			record("batch", fmt.Sprintf("srun exited: %v", err))
			stepDone = true
		case <-term:
			termed = true
		case <-tick.C:
			if batchFiles(dir, srun, stdin, record) {
				return 0
			}
		}
	}
	return 0
}

// batchFiles carries out the control files present; true means exit.
func batchFiles(dir string, srun *os.Process, stdin io.WriteCloser, record func(string, string)) bool {
	take := func(name string) bool { return os.Remove(filepath.Join(dir, name)) == nil }
	for _, c := range []string{CommandStop, CommandStopNow} {
		if take(c) {
			_, err := stdin.Write(StopCommand(c == CommandStopNow))
			record("batch", fmt.Sprintf("sent %s: %v", c, err))
		}
	}
	if take("close-stdin") {
		record("batch", fmt.Sprintf("closed stdin: %v", stdin.Close()))
	}
	if take("kill-srun") {
		record("batch", fmt.Sprintf("killed srun: %v", srun.Kill()))
	}
	if take("requeue") {
		out, err := exec.Command("scontrol", "requeue", os.Getenv("SLURM_JOB_ID")).CombinedOutput()
		record("batch", fmt.Sprintf("scontrol requeue: %v %s", err, out))
		return true
	}
	return false
}

// e2eJob is one submitted test job and what the test reads of it.
type e2eJob struct {
	t   *testing.T
	dir string
	id  string
}

func requireCluster(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	out, err := exec.Command("sinfo", "-h", "-p", "gpu_ai", "-o", "%D").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Skipf("no cluster (run scripts/slurm-cluster.sh up): %v", err)
	}
}

func slurmCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// submit starts the test job on gpu_ai; it is cancelled at cleanup.
func submit(t *testing.T) *e2eJob {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id := slurmCmd(t, "sbatch", "--parsable", "-p", "gpu_ai", "-N1", "--requeue", "-J", "shim-e2e",
		"-o", filepath.Join(dir, "job.out"),
		"--export=ALL,SHIM_TEST_HELPER=batch,SHIM_TEST_DIR="+dir, "--wrap", "exec "+self+" -test.run=^$")
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	return &e2eJob{t: t, dir: dir, id: id}
}

// lines reads what the batch side logged so far.
func (j *e2eJob) lines() []logLine {
	b, _ := os.ReadFile(filepath.Join(j.dir, "log.jsonl"))
	var out []logLine
	for _, l := range strings.Split(string(b), "\n") {
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil {
			out = append(out, ll)
		}
	}
	return out
}

// waitEvent polls until the batch side has seen a marker of kind; it
// returns the event and when the batch side read it.
func (j *e2eJob) waitEvent(kind EventKind, timeout time.Duration) (Event, time.Time) {
	j.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, l := range j.lines() {
			if ev, ok := ParseMarker(l.Line, testToken); ok && ev.Kind == kind && l.Src == "stderr" {
				return ev, l.T
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	j.t.Fatalf("job %s: no %s marker within %v; log:\n%s", j.id, kind, timeout, j.dump())
	return Event{}, time.Time{}
}

func (j *e2eJob) dump() string {
	var b strings.Builder
	for _, l := range j.lines() {
		fmt.Fprintf(&b, "%s %s %s\n", l.T.Format("15:04:05.000"), l.Src, l.Line)
	}
	return b.String()
}

// holdThenStop is the common half of each test: Slurm's SIGTERM reaches
// the shim, the batch side sees the marker, the child keeps running until
// the test asks for the stop.
func holdThenStop(t *testing.T, j *e2eJob, child int, provoke func()) {
	provoke()
	ev, seen := j.waitEvent(EventSignal, 60*time.Second)
	t.Logf("job %s: %s marker read by the batch side %v after the shim wrote it",
		j.id, ev.Signal, seen.Sub(ev.Time).Round(time.Microsecond))
	// Slurm signalled the child too: the SIGTERM is pending, blocked.
	if ev.Signal != "SIGTERM" || !alive(child) || !hasSignal(t, procStatus(child, "ShdPnd"), syscall.SIGTERM) {
		t.Fatalf("after Slurm's signal: event %+v, child alive %v, pending %s",
			ev, alive(child), procStatus(child, "ShdPnd"))
	}
	if err := os.WriteFile(filepath.Join(j.dir, CommandStop), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exited, _ := j.waitEvent(EventExited, 30*time.Second)
	if exited.Reason != ReasonStop || exited.Signal != "SIGINT" {
		t.Errorf("exited event = %+v, want reason stop by SIGINT; log:\n%s", exited, j.dump())
	}
	waitGone(t, child)
	t.Logf("job %s: batch side log:\n%s", j.id, j.dump())
}

func TestE2EPreemptionHeldUntilStop(t *testing.T) {
	requireCluster(t)
	j := submit(t)
	started, _ := j.waitEvent(EventStarted, 60*time.Second)
	child := started.ChildPID
	var preemptor string
	holdThenStop(t, j, child, func() {
		preemptor = slurmCmd(t, "sbatch", "--parsable", "-p", "gpu_vasp", "-N3", "--exclusive",
			"-o", "/dev/null", "--wrap", "sleep 5")
		t.Cleanup(func() { _ = exec.Command("scancel", preemptor).Run() })
	})
}

func TestE2EScancelHeldUntilStop(t *testing.T) {
	requireCluster(t)
	j := submit(t)
	started, _ := j.waitEvent(EventStarted, 60*time.Second)
	child := started.ChildPID
	holdThenStop(t, j, child, func() { slurmCmd(t, "scancel", j.id) })
}

// TestE2EStdinClosedThroughSrun: the batch side closing the step's stdin
// reaches the shim as the end of its commands.
func TestE2EStdinClosedThroughSrun(t *testing.T) {
	requireCluster(t)
	j := submit(t)
	started, _ := j.waitEvent(EventStarted, 60*time.Second)
	if err := os.WriteFile(filepath.Join(j.dir, "close-stdin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j.waitEvent(EventStdinClosed, 30*time.Second)
	if !alive(started.ChildPID) {
		t.Errorf("child ended when stdin closed, before any signal")
	}
	slurmCmd(t, "scancel", j.id)
	exited, _ := j.waitEvent(EventExited, 30*time.Second)
	if exited.Reason != ReasonStdinClosed {
		t.Errorf("exited event = %+v, want reason %s", exited, ReasonStdinClosed)
	}
	waitGone(t, started.ChildPID)
	t.Logf("job %s: batch side log:\n%s", j.id, j.dump())
}

// TestE2EKilledSrunLeavesNoChild: SIGKILL of the srun client (the
// supervisor's last resort) ends the step, shim and child.
func TestE2EKilledSrunLeavesNoChild(t *testing.T) {
	requireCluster(t)
	j := submit(t)
	started, _ := j.waitEvent(EventStarted, 60*time.Second)
	killed := time.Now()
	if err := os.WriteFile(filepath.Join(j.dir, "kill-srun"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitGone(t, started.ChildPID)
	waitGone(t, started.ShimPID)
	t.Logf("job %s: shim and child gone %v after asking for the srun kill; batch side log:\n%s",
		j.id, time.Since(killed).Round(time.Millisecond), j.dump())
}

// TestE2EStopThenRequeueFreesNodes: the ordered end of a preempted run —
// steps stopped first, then `scontrol requeue` from the batch side, then
// exit — hands the nodes to the preemptor at once and keeps the job queued.
func TestE2EStopThenRequeueFreesNodes(t *testing.T) {
	requireCluster(t)
	j := submit(t)
	started, _ := j.waitEvent(EventStarted, 60*time.Second)
	var preemptor string
	holdThenStop(t, j, started.ChildPID, func() {
		preemptor = slurmCmd(t, "sbatch", "--parsable", "-p", "gpu_vasp", "-N3", "--exclusive",
			"-o", "/dev/null", "--wrap", "sleep 5")
		t.Cleanup(func() { _ = exec.Command("scancel", preemptor).Run() })
	})
	requeued := time.Now()
	if err := os.WriteFile(filepath.Join(j.dir, "requeue"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for slurmCmd(t, "squeue", "-h", "-j", preemptor, "-o", "%T") != "RUNNING" {
		if time.Now().After(deadline) {
			t.Fatalf("preemptor %s not running 60 s after the requeue; log:\n%s", preemptor, j.dump())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("preemptor %s running %v after the batch side was asked to requeue",
		preemptor, time.Since(requeued).Round(time.Millisecond))
	show := slurmCmd(t, "scontrol", "-o", "show", "job", j.id)
	if !strings.Contains(show, "Restarts=1") {
		t.Errorf("job %s not requeued: %s", j.id, show)
	}
}
