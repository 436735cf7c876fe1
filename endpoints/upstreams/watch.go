package upstreams

import (
	"context"
	"os"
	"time"

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
}

// PassResult is one pass's outcome as seen by a Watch observer.
type PassResult struct {
	Report Report
	Err    error
}

// watchState is what the Watch loop owns.
type watchState struct {
	u       *Updater
	events  chan string // from the current dirWatcher
	w       *dirWatcher // nil when the dir is not watched
	watched os.FileInfo // the endpoint dir being watched; nil when none
	pending bool        // a coalesced pass is due
	timer   *time.Timer
}

// Watch runs passes until ctx ends: one at start, one after each burst of
// changes in the endpoint dir (coalesced for cfg.Coalesce), and one every
// cfg.SweepInterval for leases and the scheduler. A missing or recreated
// directory is watched again at the next sweep. Pass errors are logged and
// counted; Watch returns only when ctx ends (nil) or fsnotify cannot start.
func (u *Updater) Watch(ctx context.Context, opts WatchOptions) error {
	s := &watchState{u: u, events: make(chan string, 64), timer: time.NewTimer(time.Hour)}
	s.timer.Stop()
	defer s.unwatch()
	sweep := time.NewTicker(u.cfg.SweepInterval)
	defer sweep.Stop()
	s.ensureWatch()
	s.runPass(ctx, opts)
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-s.events:
			s.handleEvent(name)
		case <-s.timer.C:
			s.pending = false
			s.runPass(ctx, opts)
		case <-sweep.C:
			s.ensureWatch()
			s.runPass(ctx, opts)
		case <-opts.Reload:
			s.handleReload(ctx, opts, sweep)
		}
	}
}

// handleEvent arms the coalescing timer for events that can change
// routing: an endpoint file, or the dir itself ("": removed, replaced).
func (s *watchState) handleEvent(name string) {
	if name != "" && !endpoints.IsEndpointFileName(name) {
		return
	}
	if name == "" {
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

// runPass runs one pass and reports it to the observer.
func (s *watchState) runPass(ctx context.Context, opts WatchOptions) {
	rep, err := s.u.Pass(ctx)
	if opts.Passed != nil {
		select {
		case opts.Passed <- PassResult{Report: rep, Err: err}:
		case <-ctx.Done():
		}
	}
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
	w, err := watchDir(dir, s.events)
	if err != nil {
		s.u.opts.Log.Warn("cannot watch endpoint dir; relying on sweeps", "dir", dir, "error", err)
		return
	}
	s.w, s.watched = w, fi
	s.u.opts.Log.Info("watching endpoint dir", "dir", dir)
}

// unwatch stops the current dirWatcher, if any.
func (s *watchState) unwatch() {
	if s.w != nil {
		s.w.Close()
	}
	s.w, s.watched = nil, nil
}
