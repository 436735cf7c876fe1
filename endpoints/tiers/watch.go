package tiers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"slurm-llm/endpoints"
)

// WatchOptions are the outside events Watch reacts to.
type WatchOptions struct {
	// Reload receives a value when the config must be re-read (SIGHUP).
	Reload <-chan struct{}
	// LoadConfig re-reads the config; nil means Reload is ignored.
	LoadConfig func() (Config, error)
	// Passed, if set, receives each pass's report and error (tests and
	// benchmarks wait on it). Watch blocks on it; keep it drained.
	Passed chan<- PassResult
	// Hints, if set, wakes Watch for a coalesced pass, like a file event:
	// on NFS the writes of other nodes raise no file event. The caller
	// owns it (ListenHints, Close).
	Hints *endpoints.Hints
	// Notify, if set, is told how the loop does, in sd_notify's words:
	// "READY=1" after the first pass, "WATCHDOG=1" every WatchdogInterval
	// from the loop itself, so that a pass that hangs stops the pings and
	// the service manager restarts the process, and "STOPPING=1" when ctx
	// ends.
	Notify func(state string)
	// WatchdogInterval is how often the loop pings Notify; 0 means never.
	WatchdogInterval time.Duration
}

// notify tells opts.Notify, if set.
func (o WatchOptions) notify(state string) {
	if o.Notify != nil {
		o.Notify(state)
	}
}

// watchdog is a ticker channel for the loop's pings; nil (never ready)
// when there is nobody to ping. stop releases it.
func watchdog(notify func(string), every time.Duration) (c <-chan time.Time, stop func()) {
	if notify == nil || every <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
}

// PassResult is one pass's outcome as seen by a Watch observer.
type PassResult struct {
	Report Report
	Err    error
}

// watchState is what the Watch loop owns.
type watchState struct {
	u       *Updater
	fw      *fsnotify.Watcher // watches the endpoint dir; nil when not watched
	dir     string            // the path fw watches
	watched os.FileInfo       // the endpoint dir being watched; nil when none
	pending bool              // a coalesced pass is due
	timer   *time.Timer
	// asking is set while a scheduler call runs in its own goroutine; its
	// outcome arrives on answers. The loop never waits on the scheduler,
	// so file events are handled while squeue hangs.
	asking  bool
	answers chan schedAnswer
	askers  sync.WaitGroup
	// tierAsking is set while the tier questions run in their own
	// goroutine; their answer arrives on tierAnswers.
	tierAsking  bool
	tierAnswers chan tierAnswer
	// staleAsking is set while the stale files' jobs are asked about.
	staleAsking  bool
	staleAnswers chan staleAnswer
}

// schedAnswer is one scheduler call's outcome.
type schedAnswer struct {
	ids  []string
	jobs map[string]Job
	err  error
}

// Watch runs passes until ctx ends: one at start (after asking the
// scheduler, as sync does, so that a restarted watcher does not hold back
// what is routed until it answers), one after each burst of
// changes in the endpoint dir or of hints (coalesced for cfg.Coalesce:
// at most one pass per coalesce interval, however many arrive), one every
// cfg.SweepInterval for leases, and one after each scheduler answer. The
// scheduler is asked in the background after a pass that found it due
// (new candidate jobs, an answer older than scheduler.max_age, a backoff
// over); passes meanwhile use the last answer, or "unknown" while it does
// not answer. A missing, moved or recreated directory is watched again at
// the next sweep; while it cannot be watched the sweeps carry on alone.
// Pass errors are logged and counted; Watch returns nil when ctx ends,
// once its scheduler call (if any) has returned.
func (u *Updater) Watch(ctx context.Context, opts WatchOptions) error {
	s := &watchState{u: u, timer: time.NewTimer(time.Hour), answers: make(chan schedAnswer, 1),
		tierAnswers: make(chan tierAnswer, 1), staleAnswers: make(chan staleAnswer, 1)}
	s.timer.Stop()
	defer s.askers.Wait()
	defer s.unwatch()
	u.openRecord()
	defer u.closeRecord()
	sweep := time.NewTicker(u.cfg.SweepInterval)
	defer sweep.Stop()
	s.ensureWatch()
	u.askIfDue(ctx) // as sync does: the first pass must not hold back what is routed
	s.runPass(ctx, opts)
	opts.notify("READY=1")
	defer opts.notify("STOPPING=1")
	ping, stopPing := watchdog(opts.Notify, opts.WatchdogInterval)
	defer stopPing()
	staleC, stopStale := s.staleTicker()
	defer stopStale()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping:
			opts.notify("WATCHDOG=1")
		case ev, ok := <-s.watchEvents():
			s.handleEvent(ev, ok)
		case err, ok := <-s.watchErrors():
			s.handleError(err, ok)
		case <-opts.Hints.C():
			u.opts.Metrics.RecordHint()
			s.onChange(fileChanged)
		case <-s.timer.C:
			s.pending = false
			s.runPass(ctx, opts)
		case <-sweep.C:
			s.ensureWatch()
			s.runPass(ctx, opts)
		case a := <-s.answers:
			s.asking = false
			u.keepAnswer(a.ids, a.jobs, a.err)
			s.runPass(ctx, opts)
		case a := <-s.tierAnswers:
			s.tierAsking = false
			u.keepTierAnswer(a)
			s.runPass(ctx, opts)
		case <-staleC:
			s.askStale(ctx)
		case a := <-s.staleAnswers:
			s.staleAsking = false
			u.removeStale(a)
		case <-opts.Reload:
			s.handleReload(ctx, opts, sweep)
		}
	}
}

// change is what one watcher event means to the Watch loop.
type change int

const (
	// noChange: a file that cannot route (a writer's temp file, a stray).
	noChange change = iota
	// fileChanged: an endpoint file was created, written, renamed (in or
	// away), removed or chmodded.
	fileChanged
	// dirChanged: the endpoint dir itself was removed, moved or chmodded,
	// or events were lost; rescan, and watch it again if it was replaced.
	dirChanged
)

// classify maps an fsnotify event on the watched dir to a change. Each
// write to a file is its own Write event (fsnotify v1.10 does not export
// close-write); that is fine, as passes are coalesced and endpoint writers
// rename a complete temp file into place, which is a Create of the name.
func classify(dir string, ev fsnotify.Event) change {
	if filepath.Clean(ev.Name) == filepath.Clean(dir) {
		return dirChanged
	}
	if !endpoints.IsEndpointFileName(filepath.Base(ev.Name)) {
		return noChange
	}
	return fileChanged
}

// watchEvents is the current watcher's event channel; nil (never ready)
// when the dir is not watched.
func (s *watchState) watchEvents() <-chan fsnotify.Event {
	if s.fw == nil {
		return nil
	}
	return s.fw.Events
}

// watchErrors is the current watcher's error channel; nil when not watched.
func (s *watchState) watchErrors() <-chan error {
	if s.fw == nil {
		return nil
	}
	return s.fw.Errors
}

// handleEvent arms the coalescing timer for events that can change
// routing. A closed channel means the watcher stopped: rescan and let
// ensureWatch start a new one.
func (s *watchState) handleEvent(ev fsnotify.Event, ok bool) {
	c := dirChanged
	if ok {
		c = classify(s.dir, ev)
	} else {
		s.unwatch()
	}
	s.onChange(c)
}

// handleError treats a watcher error (a kernel queue overflow above all)
// as lost events: rescan everything.
func (s *watchState) handleError(err error, ok bool) {
	if !ok {
		s.unwatch()
	} else if !errors.Is(err, fsnotify.ErrEventOverflow) {
		s.u.opts.Log.Warn("endpoint dir watcher error; rescanning", "dir", s.dir, "error", err)
	}
	s.onChange(dirChanged)
}

// onChange re-checks the watch when the dir itself changed and schedules
// one coalesced pass for any change.
func (s *watchState) onChange(c change) {
	if c == noChange {
		return
	}
	if c == dirChanged {
		s.ensureWatch()
	}
	if !s.pending {
		s.pending = true
		s.timer.Reset(s.u.cfg.Coalesce)
	}
}

// handleReload re-reads the config and applies it to the loop.
func (s *watchState) handleReload(ctx context.Context, opts WatchOptions, sweep *time.Ticker) {
	if opts.LoadConfig == nil {
		return
	}
	cfg, err := opts.LoadConfig()
	if err != nil {
		s.u.opts.Log.Error("config reload failed; keeping the old config", "error", err)
		return
	}
	s.u.SetConfig(cfg)
	sweep.Reset(cfg.SweepInterval)
	s.u.opts.Log.Info("config reloaded", "path", cfg.Path)
	s.ensureWatch()
	s.runPass(ctx, opts)
}

// runPass runs one pass under the lock with the scheduler state in hand,
// starts a scheduler call if one is due, and reports the pass to the
// observer.
func (s *watchState) runPass(ctx context.Context, opts WatchOptions) {
	start := s.u.opts.Now()
	rep, err := s.u.pass(ctx)
	rep.Duration = s.u.opts.Now().Sub(start)
	s.u.record(rep, err)
	s.u.commitPass(rep, err)
	s.askIfDue(ctx, rep.Scan.Entries)
	s.askTiersIfDue(ctx)
	if opts.Passed != nil {
		select {
		case opts.Passed <- PassResult{Report: rep, Err: err}:
		case <-ctx.Done():
		}
	}
}

// askIfDue starts a scheduler call about the candidates of entries in its
// own goroutine when one is due and none runs.
func (s *watchState) askIfDue(ctx context.Context, entries []endpoints.Entry) {
	ids, due := s.u.schedulerDue(entries, s.u.opts.Now())
	if !due || s.asking {
		return
	}
	s.asking = true
	sched, timeout := s.u.opts.Scheduler, s.u.cfg.Scheduler.Timeout
	s.askers.Add(1)
	go func() {
		defer s.askers.Done()
		jobs, err := askScheduler(ctx, sched, timeout, ids)
		s.answers <- schedAnswer{ids: ids, jobs: jobs, err: err} // buffered: one call at a time
	}()
}

// askTiersIfDue starts the tier questions in their own goroutine when due
// and none run.
func (s *watchState) askTiersIfDue(ctx context.Context) {
	names, running, parts, due := s.u.tiersDue(s.u.opts.Now())
	if !due || s.tierAsking || s.asking {
		return // one call at a time; after the scheduler check, which may find Slurm down
	}
	s.tierAsking = true
	q, timeout, now := s.u.opts.Queue, s.u.cfg.Scheduler.Timeout, s.u.opts.Now
	s.askers.Add(1)
	go func() {
		defer s.askers.Done()
		s.tierAnswers <- askTiers(ctx, q, timeout, names, running, parts, now) // buffered: one at a time
	}()
}

// staleTicker ticks every stale.interval when stale files are removed (and
// the scheduler is asked at all); otherwise its channel is nil.
func (s *watchState) staleTicker() (<-chan time.Time, func()) {
	c := s.u.cfg
	if !c.Stale.Remove || !c.Scheduler.Check || s.u.opts.Scheduler == nil || s.u.opts.ReadOnly {
		return nil, func() {}
	}
	t := time.NewTicker(c.Stale.Interval)
	return t.C, t.Stop
}

// askStale asks the scheduler, in its own goroutine, about the jobs of the
// files that may be stale (not routed, lease ended stale.grace ago).
func (s *watchState) askStale(ctx context.Context) {
	if s.staleAsking {
		return
	}
	cands := identify(s.u.cfg.EndpointDir, staleCandidates(s.u.decisions, s.u.opts.Now(), s.u.cfg.Stale.Grace))
	if len(cands) == 0 {
		return
	}
	ids := make([]string, 0, len(cands))
	for _, c := range cands {
		ids = append(ids, c.JobID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	s.staleAsking = true
	sched, timeout := s.u.opts.Scheduler, s.u.cfg.Scheduler.Timeout
	s.askers.Add(1)
	go func() {
		defer s.askers.Done()
		jobs, err := askScheduler(ctx, sched, timeout, ids)
		s.staleAnswers <- staleAnswer{cands: cands, jobs: jobs, err: err} // buffered: one at a time
	}()
}

// ensureWatch (re)adds the endpoint dir to the watcher when it is not
// watched yet, was removed, or was replaced by a new directory.
func (s *watchState) ensureWatch() {
	dir := s.u.cfg.EndpointDir
	fi, err := os.Stat(dir)
	if err != nil {
		if s.watched != nil {
			s.u.opts.Log.Warn("endpoint dir gone; will watch it again when it is back", "dir", dir, "error", err)
		}
		s.unwatch()
		return
	}
	if s.watched != nil && os.SameFile(s.watched, fi) {
		return
	}
	s.unwatch()
	fw, err := watchDir(dir)
	if err != nil {
		s.u.opts.Log.Warn("cannot watch endpoint dir; relying on sweeps", "dir", dir, "error", err)
		return
	}
	s.fw, s.dir, s.watched = fw, dir, fi
	s.u.opts.Log.Info("watching endpoint dir", "dir", dir)
}

// watchDir starts a watcher on dir alone. A watcher per directory, rather
// than one re-pointed with Add and Remove, means a replaced directory never
// shares state with the one it replaced.
func watchDir(dir string) (*fsnotify.Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("start watcher: %w", err)
	}
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	return fw, nil
}

// unwatch stops the current watcher, if any; its channels are not read
// again, so nothing it had queued reaches the loop.
func (s *watchState) unwatch() {
	if s.fw != nil {
		s.fw.Close()
	}
	s.fw, s.dir, s.watched = nil, "", nil
}
