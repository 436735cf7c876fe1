package tiers_test

// The core with its nginx consumer (endpoints/nginx.Site), which imports
// the core: these tests are outside package tiers, taking what they need
// of its internal tests through export_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/nginx"
	. "slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
)

// fakeNginx records the nginx commands a Site runs and fails the ones
// named in fail ("test" or "reload").
type fakeNginx struct {
	mu    sync.Mutex
	fail  map[string]bool
	calls []string
}

func (f *fakeNginx) Run(_ context.Context, argv []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	kind := "reload"
	if strings.Contains(strings.Join(argv, " "), "-t") {
		kind = "test"
	}
	f.calls = append(f.calls, kind)
	if f.fail[kind] {
		return []byte("nginx: [emerg] broken"), errors.New("exit status 1")
	}
	return nil, nil
}

// count is how many times kind ran.
func (f *fakeNginx) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == kind {
			n++
		}
	}
	return n
}

// withSite is opts with an nginx Site writing into a fresh output
// directory through f, and that directory.
func withSite(t testing.TB, f *fakeNginx, opts Options) (Options, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nginx")
	cfg := nginx.DefaultConfig()
	cfg.OutputDir = dir
	opts.Consumers = append(opts.Consumers, nginx.NewSite(cfg, "llm-upstreams test", f, nil))
	return opts, dir
}

// readDirFiles maps each visible file of dir to its content.
func readDirFiles(dir string) map[string]string {
	out := map[string]string{}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, de.Name()))
		out[de.Name()] = string(b)
	}
	return out
}

// A second pass over the same files writes nothing and reloads nothing.
func TestPassTwiceReloadsOnce(t *testing.T) {
	cfg := NewConfig(t)
	if err := endpoints.Write(cfg.EndpointDir, EndpointAt("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	f := &fakeNginx{}
	m := &Metrics{}
	opts, _ := withSite(t, f, Options{Now: func() time.Time { return T0 }, Metrics: m})
	u := New(cfg, opts)
	for i := 0; i < 3; i++ {
		if _, err := u.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff([]string{"test", "reload"}, f.calls); d != "" {
		t.Errorf("nginx calls (-want +got):\n%s", d)
	}
	var b bytes.Buffer
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"llm_upstreams_passes_total 3", "llm_upstreams_reloads_total 1", `llm_upstreams_endpoints{tier="fast"} 1`, `llm_upstreams_endpoints{tier="reasoning"} 1`} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, b.String())
		}
	}
}

// A failing nginx test is counted and leaves the last good files.
func TestPassTestFailureCounted(t *testing.T) {
	cfg := NewConfig(t)
	f := &fakeNginx{}
	m := &Metrics{}
	opts, out := withSite(t, f, Options{Now: func() time.Time { return T0 }, Metrics: m})
	u := New(cfg, opts)
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := readDirFiles(out)
	if err := endpoints.Write(cfg.EndpointDir, EndpointAt("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	f.fail = map[string]bool{"test": true}
	if _, err := u.Pass(context.Background()); !errors.Is(err, nginx.ErrTestFailed) {
		t.Fatalf("pass = %v, want nginx.ErrTestFailed", err)
	}
	if d := cmp.Diff(good, readDirFiles(out)); d != "" {
		t.Errorf("files after failed test (-good +got):\n%s", d)
	}
	var b bytes.Buffer
	_ = m.WritePrometheus(&b)
	if !strings.Contains(b.String(), "llm_upstreams_test_failures_total 1\n") {
		t.Errorf("test failure not counted:\n%s", b.String())
	}
}

// The endpoint dir missing (shared file system not mounted) must not empty
// every tier: the pass fails and the last good files stay.
func TestPassMissingDirKeepsFiles(t *testing.T) {
	cfg := NewConfig(t)
	if err := endpoints.Write(cfg.EndpointDir, EndpointAt("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	f := &fakeNginx{}
	opts, out := withSite(t, f, Options{Now: func() time.Time { return T0 }})
	u := New(cfg, opts)
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := readDirFiles(out)
	if err := os.RemoveAll(cfg.EndpointDir); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Pass(context.Background()); err == nil {
		t.Fatalf("pass over a missing dir = nil error")
	}
	if d := cmp.Diff(good, readDirFiles(out)); d != "" {
		t.Errorf("files changed (-good +got):\n%s", d)
	}
}

// A pass with the tier queue answering: the view of a tier with nothing
// live says why and when, its Retry-After is rendered and its 503 body is
// written beside the upstream file; a later estimate rewrites the body
// without reloading nginx while its Retry-After bucket holds.
func TestPassWritesViewsAndBodies(t *testing.T) {
	cfg := NewConfig(t)
	cfg.StateDir = t.TempDir()
	if err := SaveMem(cfg.StateDir, map[string]TierMem{"fast": {Ready: []float64{20}}}); err != nil {
		t.Fatal(err)
	}
	q := NewFakeQueue([]slurm.QueuedJob{{ID: "7", State: slurm.JobPending, Reason: "Priority", Priority: 1,
		UID: Me, Partition: "gpu_ai", Name: "llm-fast", Start: T0.Add(10 * time.Minute)}}...)
	f := &fakeNginx{}
	now := T0
	opts, out := withSite(t, f, Options{Queue: q, Now: func() time.Time { return now }})
	u := New(cfg, opts)
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Views[0]
	if v.Tier != "fast" || v.State != StateDown || v.Reason != ReasonQueued || v.Job != "7" ||
		v.ExpectedBack == nil || !v.ExpectedBack.Equal(T0.Add(10*time.Minute+20*time.Second)) || v.RetryAfter != 600 {
		t.Fatalf("view %+v", v)
	}
	conf, _ := os.ReadFile(filepath.Join(out, "upstream-fast.conf"))
	if !strings.Contains(string(conf), "map $host $slurm_llm_fast_retry_after { default 600; }") {
		t.Errorf("upstream file without the Retry-After:\n%s", conf)
	}
	body := readBody(t, out, "fast")
	if body["expected_back"] != "2026-11-21T12:10:20Z" || body["reason"] != ReasonQueued {
		t.Errorf("body %v", body)
	}
	reloads := f.count("reload")
	q.SetQueued(func(jobs []slurm.QueuedJob) { jobs[0].Start = T0.Add(11 * time.Minute) })
	now = T0.Add(time.Second)
	u.ForgetTierAnswer() // answer due again
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, out, "fast"); body["expected_back"] != "2026-11-21T12:11:20Z" {
		t.Errorf("body after a new estimate: %v", body)
	}
	if f.count("reload") != reloads {
		t.Errorf("a new estimate in the same Retry-After bucket reloaded nginx")
	}
}

func readBody(t *testing.T, dir, tier string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, nginx.UnavailableFile(tier)))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return doc
}

// BenchmarkSyncUnchanged1000 is one sync pass over 1,000 endpoint files
// when nothing changed (target: under 50 ms a pass), with a fake nginx. It
// reports the reloads made by all the timed passes (target: 0).
func BenchmarkSyncUnchanged1000(b *testing.B) {
	cfg := NewConfig(b)
	for i := 0; i < 1000; i++ {
		tier := []string{"fast", "reasoning"}[i%2]
		e := EndpointAt(tier, fmt.Sprint(10000+i), fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), 8080)
		if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
			b.Fatal(err)
		}
		SettleFile(b, filepath.Join(cfg.EndpointDir, endpoints.FileName(tier, e.JobID)))
	}
	f := &fakeNginx{}
	opts, _ := withSite(b, f, Options{Scheduler: EveryRunning, Now: func() time.Time { return T0 }})
	u := New(cfg, opts)
	if _, err := u.Pass(context.Background()); err != nil {
		b.Fatal(err)
	}
	f.calls = nil
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := u.Pass(context.Background())
		if err != nil || len(rep.Decisions) != 1000 {
			b.Fatalf("pass: %d decisions, %v", len(rep.Decisions), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(f.count("reload")), "reloads")
	b.ReportMetric(float64(b.N), "passes")
}
