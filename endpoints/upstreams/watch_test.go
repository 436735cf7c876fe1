package upstreams

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"slurm-llm/endpoints"
)

// watchHarness runs Watch in the background and lets a test wait for a pass
// whose report satisfies a condition.
type watchHarness struct {
	t      *testing.T
	passed chan PassResult
	reload chan struct{}
	done   chan error
}

func startWatch(t *testing.T, u *Updater, load func() (Config, error)) *watchHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &watchHarness{t: t, passed: make(chan PassResult), reload: make(chan struct{}), done: make(chan error, 1)}
	go func() { h.done <- u.Watch(ctx, WatchOptions{Passed: h.passed, Reload: h.reload, LoadConfig: load}) }()
	t.Cleanup(func() {
		cancel()
		for {
			select {
			case <-h.passed:
			case err := <-h.done:
				if err != nil {
					t.Errorf("Watch returned %v", err)
				}
				return
			}
		}
	})
	return h
}

// waitFor polls passes until cond holds or a deadline passes.
func (h *watchHarness) waitFor(what string, cond func(Report) bool) {
	h.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case p := <-h.passed:
			if cond(p.Report) {
				return
			}
		case <-deadline.C:
			h.t.Fatalf("no pass where %s within 10s", what)
		}
	}
}

// sendReload hands a reload to Watch, draining passes meanwhile.
func (h *watchHarness) sendReload() {
	for {
		select {
		case h.reload <- struct{}{}:
			return
		case <-h.passed:
		}
	}
}

func servers(tier string) func(Report) []string {
	return func(r Report) []string {
		for _, t := range r.Tiers {
			if t.Tier == tier {
				return t.Servers
			}
		}
		return nil
	}
}

func TestWatch(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour // only file events drive passes, until the dir is recreated
	f := &fakeNginx{dir: cfg.OutputDir}
	u := New(cfg, Options{Runner: f, Now: func() time.Time { return t0 }})
	h := startWatch(t, u, nil)
	fast := servers("fast")
	h.waitFor("the first pass ran", func(r Report) bool { return len(r.Tiers) == 2 })

	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("fast routes to the new file", func(r Report) bool { return slices.Equal(fast(r), []string{"10.0.0.1:8080"}) })

	if err := endpoints.Remove(cfg.EndpointDir, "fast", "1"); err != nil {
		t.Fatal(err)
	}
	h.waitFor("fast has nothing after removal", func(r Report) bool { return len(fast(r)) == 0 && r.Reloaded })
}

// The endpoint dir removed and made again (a remount, an admin's rm -r) is
// watched again: a file written into the new dir is routed.
func TestWatchDirRecreated(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = 20 * time.Millisecond
	u := New(cfg, Options{Runner: &fakeNginx{dir: cfg.OutputDir}, Now: func() time.Time { return t0 }})
	h := startWatch(t, u, nil)
	h.waitFor("the first pass ran", func(r Report) bool { return len(r.Tiers) == 2 })
	if err := os.RemoveAll(cfg.EndpointDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.EndpointDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("reasoning", "5", "10.0.0.5", 9000)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("reasoning routes to the file in the new dir", func(r Report) bool {
		return slices.Equal(servers("reasoning")(r), []string{"10.0.0.5:9000"})
	})
}

// SIGHUP (the Reload channel) re-reads the config: a new tier gets its file.
func TestWatchReloadConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	next := cfg
	next.Tiers = map[string]TierConfig{"fast": {}, "reasoning": {Backup: "fast"}, "code": {}}
	u := New(cfg, Options{Runner: &fakeNginx{dir: cfg.OutputDir}, Now: func() time.Time { return t0 }})
	h := startWatch(t, u, func() (Config, error) { return next, nil })
	h.waitFor("the first pass ran", func(r Report) bool { return len(r.Tiers) == 2 })
	h.sendReload()
	h.waitFor("three tiers after reload", func(r Report) bool { return len(r.Tiers) == 3 })
	if _, err := os.Stat(cfg.OutputDir + "/upstream-code.conf"); err != nil {
		t.Errorf("new tier's file: %v", err)
	}
}
