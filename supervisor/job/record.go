package job

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/fsutil"
	"slurm-llm/supervisor"
)

// runRecord keeps the job's run state file (RunState) up to
// date: the run is begun at start, marked ready the first time the tier is
// ready, and ended with its cause. A tier that never becomes ready then
// stops requeueing itself after max_failed_runs runs. File errors are
// logged: they must not take a serving tier down. The file lives on the
// shared file system, so saves run off the caller's goroutine (the
// runner's observer must return at once), latest state first; the start
// and the end of a run wait for theirs, bounded by saveWait.
type runRecord struct {
	path   string
	now    func() time.Time
	log    hclog.Logger
	writes *fsutil.Latest

	mu    sync.Mutex
	state RunState
	ready bool
}

// saveWait bounds the wait for the run state's save at a run's start and end.
const saveWait = 5 * time.Second

// beginRun loads the state file and records the start of this run.
func beginRun(path, tier, jobID string, restartCount int, log hclog.Logger) *runRecord {
	r := &runRecord{path: path, now: time.Now, log: log}
	r.writes = fsutil.NewLatest(time.Second, func(rep fsutil.Report) {
		switch {
		case rep.Err != nil:
			log.Warn("cannot save run state", "path", path, "error", rep.Err)
		default:
			log.Warn("run state save is slow: storage stalled?", "path", path, "took", rep.Took.Round(time.Millisecond))
		}
	})
	s, err := LoadRunState(path)
	if err != nil {
		log.Warn("run state unreadable: starting a fresh one", "error", err)
		s = RunState{}
	}
	s.Tier, s.JobID = tier, jobID
	r.state = s.BeginRun(restartCount, r.now())
	r.save()
	r.flush()
	return r
}

// observe is a runner Observer: the first ready state ends the failure
// streak; a failure before it (recovering, gave up) makes the run count as
// failed however it ends.
func (r *runRecord) observe(e supervisor.Event) {
	if e.Kind != supervisor.EventState {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return
	}
	switch e.State {
	case supervisor.StateReady:
		r.ready = true
		r.state = r.state.Ready(r.now())
	case supervisor.StateRecovering, supervisor.StateFailed:
		if r.state.SawFailure {
			return
		}
		r.state = r.state.Failed(r.now())
	default:
		return
	}
	r.saveLocked()
}

// wasReady reports whether the tier was ready at some point of this run.
func (r *runRecord) wasReady() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// end records how the run ended and returns the state to decide a requeue on.
func (r *runRecord) end(cause Cause) RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = r.state.EndRun(cause, r.now())
	r.saveLocked()
	r.flush()
	return r.state
}

func (r *runRecord) save() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.saveLocked()
}

// saveLocked queues a save of the current state; r.mu is held.
func (r *runRecord) saveLocked() {
	path, st := r.path, r.state
	r.writes.Do(func() error { return SaveRunState(path, st) })
}

// flush waits for the queued saves, at most saveWait.
func (r *runRecord) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), saveWait)
	defer cancel()
	if err := r.writes.Wait(ctx); err != nil {
		r.log.Warn("run state not saved in time: storage slow", "path", r.path, "wait", saveWait)
	}
}
