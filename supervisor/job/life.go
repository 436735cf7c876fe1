// Package job owns the life of the sbatch job around a running tier: the
// stop notices (signals to the supervisor, a step's shim reporting Slurm's
// SIGTERM, the periodic look at the job in Slurm), why the run ends
// (ClassifyNotice), what follows the drain (requeue confirmed by Slurm, wait
// for Slurm's own signal, or exit), and the run records that stop a tier
// which never becomes ready from requeueing itself forever.
//
// It decides about the job; it never starts or stops a process itself (the
// runner, supervisor.Runner, does, when asked through Stop) and never reads
// Slurm's output itself (slurm.Client does, behind the Slurm interface).
package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
	"slurm-llm/supervisor"
)

// Slurm is what the job's life asks of Slurm; *slurm.Client implements it.
// Errors mean Slurm did not answer (or refused), never that the job is gone.
type Slurm interface {
	ShowJob(ctx context.Context, id string) (slurm.JobInfo, error)
	Requeue(ctx context.Context, id string) error
	NodesDown(ctx context.Context, nodes []string) (bool, error)
}

// Tier is a tier as the job sees it: *supervisor.Runner.
type Tier interface {
	// Run supervises the tier until an ordered stop ends (nil) or it gives up.
	Run(ctx context.Context) error
	// Stop asks for an ordered stop; it never blocks.
	Stop(supervisor.StopRequest)
}

// Outcome is how a job's life ended, for the exit code.
type Outcome int

// The outcomes of Life.Run.
const (
	// Stopped: an ordered stop ended and what had to follow it was done
	// (requeued, waited for Slurm, or nothing).
	Stopped Outcome = iota
	// GaveUp: the tier gave up (failure budget, too few workers), or it kept
	// failing to become ready and was not requeued; the log says why.
	GaveUp
)

// Timing holds the intervals of the job's life; zero fields get the
// defaults (DefaultTiming), tests shorten them.
type Timing struct {
	// Poll is how often the job is looked at in Slurm as a backstop for
	// missed notices; PollTimeout bounds one look.
	Poll, PollTimeout time.Duration
	// ClassifyRetry is the pause before asking Slurm again why the run ends.
	ClassifyRetry time.Duration
	// RequeueRetry is the pause between requeue attempts.
	RequeueRetry time.Duration
	// WaitPoll is how often a job waiting for Slurm looks at itself.
	WaitPoll time.Duration
	// RestartConfirm is how long a stop of a step that Slurm does not
	// explain is given to become explained (a preemption shown late)
	// before the tier restarts in place.
	RestartConfirm time.Duration
}

// DefaultTiming is the timing of a real job.
var DefaultTiming = Timing{
	Poll:           10 * time.Second,
	PollTimeout:    5 * time.Second,
	ClassifyRetry:  300 * time.Millisecond,
	RequeueRetry:   time.Second,
	WaitPoll:       time.Second,
	RestartConfirm: 3 * time.Second,
}

// withDefaults fills zero fields from DefaultTiming.
func (t Timing) withDefaults() Timing {
	d := DefaultTiming
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.Poll, &d.Poll}, {&t.PollTimeout, &d.PollTimeout}, {&t.ClassifyRetry, &d.ClassifyRetry},
		{&t.RequeueRetry, &d.RequeueRetry}, {&t.WaitPoll, &d.WaitPoll}, {&t.RestartConfirm, &d.RestartConfirm},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Options are what a job's life needs. Alloc, Slurm and Log are required.
type Options struct {
	// Alloc is the job's allocation, from its environment.
	Alloc slurm.Allocation
	// Slurm answers about the job.
	Slurm Slurm
	// Signals delivers the supervisor's own SIGTERM, SIGINT and SIGUSR1
	// (caught once, in main, before anything else starts).
	Signals <-chan os.Signal
	// Tier names the tier; RunState is its run state file (RunStatePath).
	Tier, RunState string
	// MaxFailedRuns: a tier that failed to become ready in this many runs
	// in a row is not requeued again.
	MaxFailedRuns int
	Log           hclog.Logger
	Timing        Timing
}

// Life is one run of the job. Build it with New before the runner (its
// Observe is the runner's observer and StepSignalled the shims' hook),
// then call Run once.
type Life struct {
	opts    Options
	timing  Timing
	notices chan notice
	record  *runRecord
	// inPlace are the times of in-place restarts (capped by
	// maxInPlaceRestarts within inPlaceWindow).
	inPlace []time.Time
}

// In-place restarts of a tier whose step someone stopped while Slurm ends
// nothing: a few, then the job ends (the keeper resubmits it), so that a
// node that keeps killing steps cannot loop forever.
const (
	maxInPlaceRestarts = 3
	inPlaceWindow      = 10 * time.Minute
)

// New begins the run: the run state file records it at once, so a run
// killed before it can record anything still counts.
func New(opts Options) *Life {
	return &Life{
		opts: opts, timing: opts.Timing.withDefaults(),
		notices: make(chan notice, 1),
		record:  beginRun(opts.RunState, opts.Tier, opts.Alloc.JobID, opts.Alloc.RestartCount, opts.Log),
	}
}

// Observe is the runner's observer (supervisor.Options.Observer): the run
// record follows the tier's states. It returns quickly.
func (l *Life) Observe(e supervisor.Event) { l.record.observe(e) }

// StepSignalled is a step's shim reporting that Slurm signalled its step
// (preemption, cancel). It never blocks: one pending notice is enough.
func (l *Life) StepSignalled() {
	select {
	case l.notices <- notice{at: time.Now()}:
	default:
	}
}

// Run supervises tier t through the job's life: every notice becomes an
// ordered stop, and what the notice's cause asks for follows the drain.
// restart builds a new tier when the tier is to start again in the same
// allocation (a step stopped while nothing ends the job); nil never does.
func (l *Life) Run(ctx context.Context, t Tier, restart func() (Tier, error)) Outcome {
	for {
		out, again := l.runOnce(ctx, t)
		if !again {
			return out
		}
		if why, ok := l.mayRestartInPlace(time.Now(), restart != nil); !ok {
			l.opts.Log.Error("not restarting the tier in place: ending the job so its nodes are not held idle", "reason", why)
			l.record.end(CauseStepStopped)
			return GaveUp
		}
		next, err := restart()
		if err != nil {
			l.opts.Log.Error("cannot restart the tier in place: ending the job", "error", err)
			l.record.end(CauseStepStopped)
			return GaveUp
		}
		l.opts.Log.Warn("restarting the tier in place: a step was stopped, but Slurm ends nothing",
			"in_place_restarts", len(l.inPlace))
		t = next
	}
}

// mayRestartInPlace counts an in-place restart at now, unless the cap is
// reached (or there is no way to restart).
func (l *Life) mayRestartInPlace(now time.Time, can bool) (string, bool) {
	if !can {
		return "no way to restart it", false
	}
	var recent []time.Time
	for _, t := range l.inPlace {
		if now.Sub(t) < inPlaceWindow {
			recent = append(recent, t)
		}
	}
	if len(recent) >= maxInPlaceRestarts {
		return fmt.Sprintf("steps were stopped %d times in %s while Slurm ended nothing", len(recent)+1, inPlaceWindow), false
	}
	l.inPlace = append(recent, now)
	return "", true
}

// runOnce runs t until its drain ends and does what follows; again reports
// that the tier is to start again in this allocation.
func (l *Life) runOnce(ctx context.Context, t Tier) (Outcome, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log, alloc := l.opts.Log, l.opts.Alloc
	st := &stopper{runner: t, classify: slurmClassifier(l.opts.Slurm, alloc, l.timing.ClassifyRetry), log: log}
	tick := time.NewTicker(l.timing.Poll)
	defer tick.Stop()
	poll := jobPoll{show: func(ctx context.Context) (slurm.JobInfo, error) { return l.opts.Slurm.ShowJob(ctx, alloc.JobID) },
		runRestarts: alloc.RestartCount, tick: tick.C, timeout: l.timing.PollTimeout, log: log}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := watchNotices(watchCtx, l.opts.Signals, l.notices, st, poll)
	err := t.Run(ctx)
	stopWatch()
	<-watchDone // afterDrain reads the signals from here on
	if err != nil {
		// The runner logged the one "gave up" line with its reason.
		return l.afterGiveUp(ctx, err), false
	}
	return l.afterDrain(ctx, st)
}

// afterGiveUp decides what follows a tier that gave up (gaveUp is the
// runner's error): when a node of the job is down (lost: too few workers
// were left), the tier is not at fault and the job is requeued, to come
// back when Slurm has the nodes; when the tier was never ready because a
// node of its allocation could not be used, the job is requeued for a
// fresh allocation (requeueFromNode); else the job ends (the keeper
// resubmits it, with backoff).
func (l *Life) afterGiveUp(ctx context.Context, gaveUp error) Outcome {
	log, alloc := l.opts.Log, l.opts.Alloc
	down, err := l.nodesDown(ctx)
	var bad *supervisor.NodeError
	if (err != nil || !down) && errors.As(gaveUp, &bad) && !l.record.wasReady() {
		return l.requeueFromNode(ctx, bad)
	}
	if err != nil {
		log.Error("cannot ask Slurm whether a node of the job is down: ending the job (the keeper resubmits it)", "error", err)
	}
	if err != nil || !down {
		l.record.end(CauseUnknown)
		return GaveUp
	}
	l.record.end(CauseNodeLost)
	log.Warn("a node of the job is down: requeueing the job rather than ending it")
	if err := requeueJob(ctx, l.opts.Slurm, alloc, l.timing.RequeueRetry, log); err != nil {
		log.Error("cannot requeue the job", "error", err)
		return GaveUp
	}
	return Stopped
}

// nodesDownTries is how many times Slurm is asked whether a node of the
// job is down before the job ends for want of an answer: a node that just
// failed is when slurmctld is slowest to answer.
const nodesDownTries = 3

// nodesDown asks Slurm whether a node of the job is down, again after
// RequeueRetry when it does not answer, nodesDownTries times in all.
func (l *Life) nodesDown(ctx context.Context) (bool, error) {
	var err error
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, l.timing.PollTimeout)
		var down bool
		down, err = l.opts.Slurm.NodesDown(cctx, l.opts.Alloc.Nodes)
		cancel()
		if err == nil || try == nodesDownTries {
			return down, err
		}
		l.opts.Log.Warn("cannot ask Slurm whether a node of the job is down: asking again", "try", try, "error", err)
		if !sleepCtx(ctx, l.timing.RequeueRetry) {
			return false, err
		}
	}
}

// requeueFromNode requeues a job whose tier gave up, never ready, on a
// node of its own allocation that Slurm shows up but that could not be
// used: right after a node failure Slurm gave a job such an allocation and
// refused every step on the node for seconds (scripts/FACTS-cluster.md N6).
// Ending the job would lose it until the keeper resubmits it; a requeue
// brings it back on a fresh allocation. The run counts as failed, so after
// max_failed_runs such runs in a row the job ends.
func (l *Life) requeueFromNode(ctx context.Context, bad *supervisor.NodeError) Outcome {
	log, alloc := l.opts.Log, l.opts.Alloc
	state := l.record.end(CauseNodeUnusable)
	ok, why := ShouldRequeue(state, l.opts.MaxFailedRuns)
	if !ok {
		log.Error("not requeueing the job: its allocations keep failing", "node", bad.Node, "reason", bad.Why, "failed_runs", why)
		return GaveUp
	}
	log.Warn("a node of the job's allocation cannot be used: requeueing the job for a fresh allocation",
		"node", bad.Node, "reason", bad.Why, "failed_runs", why)
	if err := requeueJob(ctx, l.opts.Slurm, alloc, l.timing.RequeueRetry, log); err != nil {
		log.Error("cannot requeue the job", "error", err)
		return GaveUp
	}
	return Stopped
}

// watchNotices hands every notice to the stopper until ctx ends; the
// returned channel closes once its goroutines are gone.
func watchNotices(ctx context.Context, sigs <-chan os.Signal, notices chan notice, st *stopper, poll jobPoll) <-chan struct{} {
	done := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		poll.run(ctx, notices)
	}()
	go func() {
		defer close(done)
		readNotices(ctx, sigs, notices, st)
		<-pollDone
	}()
	return done
}

// readNotices hands every signal and shim notice to the stopper, in order,
// until ctx ends. A classification under way when ctx ends is finished (it
// has its own timeout): what follows the drain depends on it, and the
// drain can end within milliseconds of the notice.
func readNotices(ctx context.Context, sigs <-chan os.Signal, shims <-chan notice, st *stopper) {
	hctx := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			st.handle(hctx, notice{signal: signalName(sig), at: time.Now()})
		case n := <-shims:
			st.handle(hctx, n)
		}
	}
}

// afterDrain does what the notice's classification says follows the
// drain: requeue the job (only once every process is stopped, and return
// only once Slurm shows it requeued), wait for Slurm's own SIGTERM (a
// preempted batch script that exits early is never requeued), or nothing.
func (l *Life) afterDrain(ctx context.Context, st *stopper) (Outcome, bool) {
	log, alloc := l.opts.Log, l.opts.Alloc
	d, ok := st.after()
	if !ok {
		l.record.end(CauseShutdown)
		return Stopped, false
	}
	if d.After == AfterRestart {
		// Give Slurm a moment to show a preemption it is slow to show.
		if !sleepCtx(ctx, l.timing.RestartConfirm) {
			return Stopped, false
		}
		cctx, cancel := context.WithTimeout(ctx, l.timing.PollTimeout)
		d = st.classify(cctx, notice{at: time.Now()})
		cancel()
		if d.After == AfterRestart {
			return Stopped, true
		}
		log.Info("run ending after all", "cause", d.Cause, "after_drain", d.After, "why", d.Why)
	}
	state := l.record.end(d.Cause)
	switch d.After {
	case AfterRequeue:
		if ok, why := ShouldRequeue(state, l.opts.MaxFailedRuns); !ok {
			log.Error("not requeueing the job: the tier keeps failing to become ready", "reason", why)
			return GaveUp, false
		}
		if err := requeueJob(ctx, l.opts.Slurm, alloc, l.timing.RequeueRetry, log); err != nil {
			log.Error("cannot requeue the job: waiting for Slurm to end or requeue it", "error", err)
			waitForSlurm(ctx, l.opts.Slurm, alloc, l.opts.Signals, l.timing.WaitPoll, l.timing.PollTimeout, log)
		}
	case AfterWait:
		log.Info("waiting for Slurm to end the job")
		waitForSlurm(ctx, l.opts.Slurm, alloc, l.opts.Signals, l.timing.WaitPoll, l.timing.PollTimeout, log)
	}
	return Stopped, false
}

// waitForSlurm blocks until Slurm's next signal, or until the job shows it
// is ending or requeued (its SIGTERM may have come already, as a notice).
func waitForSlurm(ctx context.Context, jobs Slurm, alloc slurm.Allocation, sigs <-chan os.Signal,
	every, timeout time.Duration, log hclog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			log.Info("signal: exiting", "signal", signalName(sig))
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		info, err := jobs.ShowJob(cctx, alloc.JobID)
		cancel()
		if err == nil && (info.State != slurm.JobRunning || info.Restarts > alloc.RestartCount) {
			log.Info("Slurm is ending the job: exiting", "state", info.State, "restarts", info.Restarts)
			return
		}
	}
}
