package tiers

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
)

func TestStaleToRemove(t *testing.T) {
	cands := []staleCand{{File: "fast-1.json", JobID: "1"}, {File: "fast-2.json", JobID: "2"},
		{File: "fast-3.json", JobID: "3"}, {File: "fast-4.json", JobID: "4"}}
	jobs := map[string]Job{"2": {State: "COMPLETED"}, "3": {State: "PENDING"}, "4": {State: "RUNNING"}}
	remove, why := staleToRemove(cands, jobs, nil)
	var got []string
	for i, c := range remove {
		got = append(got, c.File+": "+why[i])
	}
	// 1 is unknown to Slurm, 2 ended; 3 was requeued (its next run writes
	// the file again), 4 runs (a hung supervisor is not ours to judge).
	want := []string{"fast-1.json: job unknown to Slurm", "fast-2.json: job COMPLETED"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if remove, _ := staleToRemove(cands, nil, errors.New("slurmctld down")); len(remove) != 0 {
		t.Errorf("a scheduler error removed %v", remove)
	}
}

func TestStaleCandidates(t *testing.T) {
	old := fileIn(endpoints.StateReady, "", t0)
	old.Endpoint.LeaseExpires = t0.Add(-11 * time.Minute)
	fresh := fileIn(endpoints.StateReady, "", t0)
	fresh.Endpoint.LeaseExpires = t0.Add(-9 * time.Minute)
	live := old
	live.Live = true
	got := staleCandidates([]endpoints.Decision{old, fresh, live}, t0, 10*time.Minute)
	if len(got) != 1 || got[0].File != "fast-7.json" || !got[0].Lease.Equal(old.Endpoint.LeaseExpires) {
		t.Errorf("candidates %+v, want only the file whose lease ended more than the grace ago", got)
	}
}

// Watch removes the file of a job the scheduler says is gone once its lease
// ended the grace ago, with a log line, and keeps the file of a job that
// still runs and any file while the scheduler does not answer.
// Regression: a supervisor killed with SIGKILL left its file forever.
func TestWatchRemovesStaleFiles(t *testing.T) {
	cfg := testConfig(t)
	cfg.Stale = StaleConfig{Remove: true, Grace: time.Millisecond, Interval: 20 * time.Millisecond}
	expired := func(job string) endpoints.Endpoint {
		e := testEndpoint("fast", job, "10.0.0.1", 8080)
		e.LeaseExpires = time.Now().Add(-time.Hour)
		e.Heartbeat, e.StartedAt = e.LeaseExpires, e.LeaseExpires
		return e
	}
	for _, job := range []string{"1", "2"} {
		if err := endpoints.Write(cfg.EndpointDir, expired(job)); err != nil {
			t.Fatal(err)
		}
	}
	sched := &switchJobs{err: errors.New("slurmctld down")}
	var logs lockedBuilder
	m := &Metrics{}
	u := New(cfg, Options{Scheduler: sched, Metrics: m, Log: testLogger(&logs)})
	h := startWatch(t, u, nil)
	h.waitFor("a few passes with the scheduler down", func(Report) bool { return sched.count() >= 3 })
	for _, f := range []string{"fast-1.json", "fast-2.json"} {
		if _, err := os.Stat(filepath.Join(cfg.EndpointDir, f)); err != nil {
			t.Fatalf("%s removed while the scheduler did not answer: %v", f, err)
		}
	}
	sched.set(map[string]Job{"2": {State: "RUNNING", UID: me, Name: "llm-fast"}}, nil) // job 1 gone
	h.waitFor("fast-1.json removed", func(Report) bool {
		_, err := os.Stat(filepath.Join(cfg.EndpointDir, "fast-1.json"))
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := os.Stat(filepath.Join(cfg.EndpointDir, "fast-2.json")); err != nil {
		t.Errorf("the file of a running job was removed: %v", err)
	}
	if !strings.Contains(logs.String(), "stale endpoint file removed: file=fast-1.json job_id=1 why=\"job unknown to Slurm\"") {
		t.Errorf("no log line for the removal:\n%s", logs.String())
	}
}

// A file rewritten after it was chosen (a new run of its job) is kept.
func TestRemoveStaleKeepsChangedFile(t *testing.T) {
	cfg := testConfig(t)
	e := testEndpoint("fast", "1", "10.0.0.1", 8080)
	if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
		t.Fatal(err)
	}
	cands := identify(cfg.EndpointDir, []staleCand{{File: "fast-1.json", JobID: "1"}})
	e.RestartCount = 1
	e.Heartbeat = e.Heartbeat.Add(time.Second)
	if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
		t.Fatal(err)
	}
	u := New(cfg, Options{})
	u.removeStale(staleAnswer{cands: cands, jobs: map[string]Job{}})
	if _, err := os.Stat(filepath.Join(cfg.EndpointDir, "fast-1.json")); err != nil {
		t.Errorf("a file rewritten since it was chosen was removed: %v", err)
	}
}

// switchJobs is a scheduler whose answer a test changes while watch runs.
type switchJobs struct {
	mu    sync.Mutex
	jobs  map[string]Job
	err   error
	calls int
}

func (s *switchJobs) Jobs(_ context.Context, ids []string) (map[string]Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.jobs, s.err
}

func (s *switchJobs) set(jobs map[string]Job, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs, s.err = jobs, err
}

func (s *switchJobs) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// testLogger logs into w at info level.
func testLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Info})
}

// lockedBuilder is a strings.Builder safe for a writer and a reader.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
