//go:build e2e

package tiers_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	. "slurm-llm/endpoints/tiers"
)

// On the site's NFS the controller's inotify never sees what the compute
// nodes write (FACTS.md). These tests make the same blindness with a
// bindfs FUSE view of a directory: a write into the backing directory
// shows in the view, but inotify on the view reports nothing.

// bindfsView mounts a bindfs view of a new backing directory (bindfs in
// the foreground, unmounted and waited for when the test ends) and returns
// both. It skips when not root or when bindfs or /dev/fuse is missing.
func bindfsView(t testing.TB) (backing, view string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("bindfs tests need root")
	}
	bin, err := exec.LookPath("bindfs")
	if err != nil {
		t.Skip("bindfs not installed (Debian package bindfs)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	root := t.TempDir()
	backing, view = filepath.Join(root, "backing"), filepath.Join(root, "view")
	for _, d := range []string{backing, view} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-f", backing, view)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := exec.Command("umount", view).Run(); err != nil {
			t.Logf("umount %s: %v; killing bindfs", view, err)
			_ = cmd.Process.Kill()
		}
		deadline := time.NewTimer(10 * time.Second)
		defer deadline.Stop()
		select {
		case <-exited:
		case <-deadline.C:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	waitUntil(t, "bindfs mounts "+view, func() bool { return isMountPoint(view) })
	return backing, view
}

// isMountPoint reports whether dir is listed in this process's mounts.
func isMountPoint(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// The premise, measured: inotify on the view reports nothing of a file
// written into the backing directory, while the file shows in the view.
func TestE2EBindfsHidesWritesFromInotify(t *testing.T) {
	backing, view := bindfsView(t)
	fw, err := WatchDirFor(view)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	if err := endpoints.Write(backing, EndpointAt("fast", "1", "127.0.0.1", 9)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the file shows in the view", func() bool {
		_, err := os.Stat(filepath.Join(view, "fast-1.json"))
		return err == nil
	})
	window := time.NewTimer(time.Second) // an observation window, not a synchronisation
	defer window.Stop()
	select {
	case ev := <-fw.Events:
		t.Fatalf("inotify on the view reported %v: the test cannot stand for NFS here", ev)
	case <-window.C:
	}
	if err := endpoints.Write(view, EndpointAt("fast", "2", "127.0.0.1", 9)); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	select {
	case <-fw.Events: // a write through the view is seen, as on a local file system
	case <-deadline.C:
		t.Fatal("a write through the view raised no event either: inotify does not work here")
	}
}

// hintRig is a private nginx routing the tiers of a watch over a bindfs
// view, whose files are written into the backing directory.
type hintRig struct {
	n       *privateNginx
	backing string
	hints   *endpoints.Hints
	cfg     config.Config
}

// startHintRig starts nginx, a hint listener on loopback and watch over
// the view with sweep; it returns once watch's first pass ran.
func startHintRig(t testing.TB, sweep time.Duration) *hintRig {
	t.Helper()
	backing, view := bindfsView(t)
	n := startNginx(t)
	hints, err := endpoints.ListenHints("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hints.Close() })
	cfg := n.config(t)
	cfg.EndpointDir, cfg.SweepInterval, cfg.Coalesce = view, sweep, 100*time.Millisecond
	u := watcher(cfg, Options{Log: hclog.NewNullLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	passed := make(chan PassResult)
	done := make(chan error, 1)
	go func() { done <- u.Watch(ctx, WatchOptions{Hints: hints, Passed: passed}) }()
	first := make(chan struct{})
	go func() { // drain, telling when the first pass ran
		for range passed {
			if first != nil {
				close(first)
				first = nil
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; close(passed) })
	<-first
	return &hintRig{n: n, backing: backing, hints: hints, cfg: cfg}
}

// publish writes a ready endpoint for fast/job pointing at h into the
// backing directory, where inotify on the view cannot see it.
func (r *hintRig) publish(t testing.TB, job string, h head) {
	t.Helper()
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: job, Host: "127.0.0.1", Port: h.port,
		State: endpoints.StateReady, Models: []string{"tiny"}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(10 * time.Minute)}
	if err := endpoints.Write(r.backing, e); err != nil {
		t.Fatal(err)
	}
}

// routeAfter publishes job → h, calls after, and returns how long nginx
// took to route fast to h.
func (r *hintRig) routeAfter(t testing.TB, job string, h head, after func()) time.Duration {
	t.Helper()
	start := time.Now()
	r.publish(t, job, h)
	after()
	waitReply(t, r.n.Fast, "/", h.name+" routed", func(rep reply) bool { return rep.body == h.name })
	return time.Since(start)
}

// Without a hint, a file written where inotify cannot see it is routed
// only by the sweep; with a hint, within the coalesce interval and one
// pass (measured with real nginx).
func TestE2EHintRoutesWhatInotifyCannotSee(t *testing.T) {
	const sweep = 3 * time.Second
	r := startHintRig(t, sweep)
	a, b := startHead(t, "head-a"), startHead(t, "head-b")

	unhinted := r.routeAfter(t, "501", a, func() {})
	t.Logf("no hint: routed after %v (sweep_interval %v)", unhinted, sweep)
	if unhinted < sweep/3 {
		t.Errorf("routed %v after a write inotify cannot see, without a hint: faster than a sweep could (%v)", unhinted, sweep)
	}

	var lat []float64
	for i, h := range []head{b, a, b, a, b, a, b, a, b, a} {
		d := r.routeAfter(t, "501", h, func() {
			if err := endpoints.SendHint(context.Background(), r.hints.Addr().String(), "fast", "501"); err != nil {
				t.Fatal(err)
			}
		})
		lat = append(lat, float64(d.Microseconds())/1000)
		if d >= time.Second {
			t.Errorf("hint %d: routed after %v, want well under a second", i, d)
		}
	}
	t.Logf("hint → routed by nginx: median %.0f ms, max %.0f ms over %d (coalesce %v)", median(lat), maxOf(lat), len(lat), r.cfg.Coalesce)
}

// BenchmarkE2EHintToRoute reports the time from an endpoint file written
// where inotify cannot see it (bindfs, standing for NFS) to nginx routing
// it: with a hint, and without (the sweep, 3 s here).
func BenchmarkE2EHintToRoute(b *testing.B) {
	const sweep = 3 * time.Second
	r := startHintRig(b, sweep)
	heads := []head{startHead(b, "head-a"), startHead(b, "head-b")}
	for i := 0; i < b.N; i++ {
		var hinted, unhinted []float64
		for s := 0; s < 10; s++ {
			d := r.routeAfter(b, "601", heads[s%2], func() {
				_ = endpoints.SendHint(context.Background(), r.hints.Addr().String(), "fast", "601")
			})
			hinted = append(hinted, float64(d.Microseconds())/1000)
		}
		for s := 0; s < 3; s++ {
			d := r.routeAfter(b, "601", heads[s%2], func() {})
			unhinted = append(unhinted, float64(d.Microseconds())/1000)
		}
		b.ReportMetric(median(hinted), "hint_median_ms")
		b.ReportMetric(maxOf(hinted), "hint_max_ms")
		b.ReportMetric(median(unhinted), "nohint_median_ms")
	}
}
