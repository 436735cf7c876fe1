package tiers

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"

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
	return startWatchWith(t, u, WatchOptions{LoadConfig: load})
}

// startWatchWith is startWatch with options; Passed and Reload are the
// harness's.
func startWatchWith(t *testing.T, u *Updater, opts WatchOptions) *watchHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &watchHarness{t: t, passed: make(chan PassResult), reload: make(chan struct{}), done: make(chan error, 1)}
	opts.Passed, opts.Reload = h.passed, h.reload
	go func() { h.done <- u.Watch(ctx, opts) }()
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
	u := New(cfg, Options{Now: func() time.Time { return t0 }})
	h := startWatch(t, u, nil)
	fast := servers("fast")
	h.waitFor("the first pass ran", func(r Report) bool { return len(r.Tiers) == 2 })

	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	h.waitFor("fast routes to the new file", func(r Report) bool { return slices.Equal(fast(r), []string{"10.0.0.1:8080"}) })

	// Written in place, not renamed: only Write events announce it.
	overwriteInPlace(t, cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.2", 8080))
	h.waitFor("fast routes to the file rewritten in place", func(r Report) bool { return slices.Equal(fast(r), []string{"10.0.0.2:8080"}) })

	if err := endpoints.Remove(cfg.EndpointDir, "fast", "1"); err != nil {
		t.Fatal(err)
	}
	h.waitFor("fast has nothing after removal", func(r Report) bool { return len(fast(r)) == 0 })
}

// The endpoint dir removed and made again (a remount, an admin's rm -r) is
// watched again: a file written into the new dir is routed.
func TestWatchDirRecreated(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = 20 * time.Millisecond
	u := New(cfg, Options{Now: func() time.Time { return t0 }})
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
	u := New(cfg, Options{Now: func() time.Time { return t0 }})
	h := startWatch(t, u, func() (Config, error) { return next, nil })
	h.waitFor("the first pass ran", func(r Report) bool { return len(r.Tiers) == 2 })
	h.sendReload()
	h.waitFor("three tiers after reload", func(r Report) bool { return len(r.Tiers) == 3 })
}

// overwriteInPlace rewrites e's existing file without a rename, as an admin's
// editor or a careless writer would.
func overwriteInPlace(t *testing.T, dir string, e endpoints.Endpoint) {
	t.Helper()
	scratch := t.TempDir()
	if err := endpoints.Write(scratch, e); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(scratch, endpoints.FileName(e.Tier, e.JobID)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, endpoints.FileName(e.Tier, e.JobID)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestClassify(t *testing.T) {
	const dir = "/var/lib/llm/endpoints"
	tests := []struct {
		name string
		dir  string
		ev   fsnotify.Event
		want change
	}{
		{name: "endpoint file created or renamed in", dir: dir, ev: fsnotify.Event{Name: dir + "/fast-1.json", Op: fsnotify.Create}, want: fileChanged},
		{name: "endpoint file written in place", dir: dir, ev: fsnotify.Event{Name: dir + "/fast-1.json", Op: fsnotify.Write}, want: fileChanged},
		{name: "endpoint file renamed away", dir: dir, ev: fsnotify.Event{Name: dir + "/fast-1.json", Op: fsnotify.Rename}, want: fileChanged},
		{name: "endpoint file removed", dir: dir, ev: fsnotify.Event{Name: dir + "/reasoning-2.json", Op: fsnotify.Remove}, want: fileChanged},
		{name: "endpoint file chmodded", dir: dir, ev: fsnotify.Event{Name: dir + "/fast-1.json", Op: fsnotify.Chmod}, want: fileChanged},
		{name: "writer's temp file", dir: dir, ev: fsnotify.Event{Name: dir + "/.fast-1.json.tmp-1", Op: fsnotify.Write}, want: noChange},
		{name: "stray non-json file", dir: dir, ev: fsnotify.Event{Name: dir + "/notes.txt", Op: fsnotify.Create}, want: noChange},
		{name: "dir removed", dir: dir, ev: fsnotify.Event{Name: dir, Op: fsnotify.Remove}, want: dirChanged},
		{name: "dir moved away", dir: dir, ev: fsnotify.Event{Name: dir, Op: fsnotify.Rename}, want: dirChanged},
		{name: "dir configured with a trailing slash", dir: dir + "/", ev: fsnotify.Event{Name: dir, Op: fsnotify.Remove}, want: dirChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, classify(tt.dir, tt.ev)); d != "" {
				t.Errorf("classify(%q, %v) (-want +got):\n%s", tt.dir, tt.ev, d)
			}
		})
	}
}

// The real watcher reports each kind of change to a file in the dir, and
// the dir itself going, as a change classify routes on.
func TestWatchDirReportsChanges(t *testing.T) {
	tests := []struct {
		name string
		do   func(t *testing.T, dir string)
		want change
	}{
		{name: "create", want: fileChanged, do: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "new-1.json")) }},
		{name: "write in place", want: fileChanged, do: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "fast-1.json")) }},
		{name: "rename into place", want: fileChanged, do: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, ".fast-2.json.tmp"))
			rename(t, filepath.Join(dir, ".fast-2.json.tmp"), filepath.Join(dir, "fast-2.json"))
		}},
		{name: "rename away", want: fileChanged, do: func(t *testing.T, dir string) {
			rename(t, filepath.Join(dir, "fast-1.json"), filepath.Join(filepath.Dir(dir), "elsewhere.json"))
		}},
		{name: "remove", want: fileChanged, do: func(t *testing.T, dir string) { removeAll(t, filepath.Join(dir, "fast-1.json")) }},
		{name: "chmod", want: fileChanged, do: func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "fast-1.json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "dir removed", want: dirChanged, do: func(t *testing.T, dir string) { removeAll(t, dir) }},
		{name: "dir moved away", want: dirChanged, do: func(t *testing.T, dir string) { rename(t, dir, dir+".old") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "endpoints")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "fast-1.json"))
			fw, err := watchDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fw.Close() })
			tt.do(t, dir)
			waitChange(t, fw, dir, tt.want)
		})
	}
}

// waitChange reads events until one classifies as want, or fails at a deadline.
func waitChange(t *testing.T, fw *fsnotify.Watcher, dir string, want change) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case ev := <-fw.Events:
			if classify(dir, ev) == want {
				return
			}
			seen = append(seen, ev.String())
		case err := <-fw.Errors:
			t.Fatalf("watcher error: %v", err)
		case <-deadline.C:
			t.Fatalf("no event classified %d within 10s; saw %q", want, seen)
		}
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func removeAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

// notes records what Watch tells the service manager.
type notes struct {
	c chan string
}

func (n *notes) notify(state string) { n.c <- state }

// next returns the next state told, or fails after 10 s.
func (n *notes) next(t *testing.T) string {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	select {
	case s := <-n.c:
		return s
	case <-deadline.C:
		t.Fatal("nothing told to the service manager within 10s")
		return ""
	}
}

// gateConsumer is a consumer that blocks, once armed, until released: a
// pass that hangs (as in an nginx -t that does not return).
type gateConsumer struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateConsumer) Consume(context.Context, *Report) error {
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return nil
}

// Watch says READY=1 after its first pass, pings WATCHDOG=1 from its loop
// only while the loop runs (a hung pass stops the pings, so systemd's
// watchdog restarts it), and says STOPPING=1 at the end.
func TestWatchNotifiesServiceManager(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	g := &gateConsumer{entered: make(chan struct{}), release: make(chan struct{})}
	u := New(cfg, Options{Consumers: []Consumer{g}, Now: func() time.Time { return t0 }})
	n := &notes{c: make(chan string, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- u.Watch(ctx, WatchOptions{Notify: n.notify, WatchdogInterval: 5 * time.Millisecond})
	}()
	if got := n.next(t); got != "READY=1" {
		t.Fatalf("first state told = %q, want READY=1", got)
	}
	for i := 0; i < 3; i++ {
		if got := n.next(t); got != "WATCHDOG=1" {
			t.Fatalf("state told while idle = %q, want WATCHDOG=1", got)
		}
	}
	g.armed.Store(true)
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	<-g.entered // the pass hangs in its consumer
	for len(n.c) > 0 {
		<-n.c // pings sent before the pass began
	}
	window := time.NewTimer(100 * time.Millisecond) // 20 intervals: an observation window
	select {
	case s := <-n.c:
		t.Errorf("told %q while a pass hung", s)
	case <-window.C:
	}
	g.armed.Store(false)
	close(g.release)
	if got := n.next(t); got != "WATCHDOG=1" {
		t.Errorf("state told after the pass = %q, want WATCHDOG=1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var last string
	for len(n.c) > 0 {
		last = <-n.c
	}
	if last != "STOPPING=1" {
		t.Errorf("last state told = %q, want STOPPING=1", last)
	}
}
