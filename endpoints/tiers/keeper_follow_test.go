package tiers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
)

// Regression (issue 27, item 2): the watcher and the front door read
// keeper_config once, at start (and SIGHUP). Started before the file
// existed, or before the tier was added to it, they took Slurm's requeue
// hold (BeginTime, +120 s) for the requeued tier's return until restarted,
// and the front door answered 121 of 739 requests 503 through a preemption
// the keeper undid in a second. Each pass now follows the file: written,
// a tier added, changed, broken (the last good one kept), removed.
func TestKeeperConfigFollowed(t *testing.T) {
	for _, mode := range []string{"watch", "front"} {
		t.Run(mode, func(t *testing.T) { testKeeperConfigFollowed(t, mode) })
	}
}

func testKeeperConfigFollowed(t *testing.T, mode string) {
	cfg := testConfig(t)
	dir := t.TempDir()
	cfg.KeeperConfig = filepath.Join(dir, "keeper.toml")
	cfg.StateDir = t.TempDir()
	if err := saveMem(cfg.StateDir, map[string]tierMem{"fast": {Ready: []float64{20}}}); err != nil {
		t.Fatal(err)
	}
	// Tier fast's job, requeued at t0-1s: held by Slurm until t0+120s.
	q := &fakeQueue{jobs: []slurm.QueuedJob{{ID: "7", State: slurm.JobPending, Reason: "BeginTime", Priority: 1, Restarts: 1,
		UID: me, Partition: "gpu_ai", Name: "llm-fast", Submit: t0.Add(-time.Second), Eligible: t0.Add(120 * time.Second),
		Start: t0.Add(120 * time.Second)}}}
	now := t0
	var logs strings.Builder
	opts := Options{Queue: q, Now: func() time.Time { return now },
		Log: hclog.New(&hclog.LoggerOptions{Output: &logs})}
	if mode == "front" {
		opts.ReadOnly = true
	}
	u := New(cfg, opts)
	n := 0
	write := func(body string) { // as an editor or config management does: a new file renamed over the old
		n++
		tmp := filepath.Join(dir, fmt.Sprintf(".keeper-%d", n))
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg.KeeperConfig); err != nil {
			t.Fatal(err)
		}
	}
	tier := func(name, extra string) string {
		return fmt.Sprintf("[tiers.%s]\nscript = \"/usr/local/bin/%s.sbatch\"\n%s", name, name, extra)
	}
	head := fmt.Sprintf("state_dir = %q\n", filepath.Join(dir, "state"))
	back := func() string {
		t.Helper()
		now = now.Add(time.Second)
		u.tiers.last.at = time.Time{} // the tier questions due again
		rep, err := u.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if v := rep.Views[0]; v.ExpectedBack != nil {
			return "at " + v.ExpectedBack.Sub(t0).String()
		}
		return "unknown"
	}
	var got []string
	got = append(got, back()) // no file yet: Slurm's hold
	write(head + tier("reasoning", ""))
	got = append(got, back()) // the file, without tier fast
	write(head + tier("reasoning", "") + tier("fast", ""))
	got = append(got, back()) // tier fast added: the keeper releases it (no node facts: no estimate)
	write(head + tier("fast", "") + "this is not toml\n")
	got = append(got, back()) // broken: the last good one is kept
	if err := os.WriteFile(cfg.KeeperConfig, []byte(head+tier("fast", "release = false\n")), 0o644); err != nil {
		t.Fatal(err) // written in place this time
	}
	got = append(got, back()) // it no longer releases: Slurm's hold again
	if err := os.Remove(cfg.KeeperConfig); err != nil {
		t.Fatal(err)
	}
	got = append(got, back()) // gone
	want := []string{"at 2m20s", "at 2m20s", "unknown", "unknown", "at 2m20s", "at 2m20s"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("expected back, pass by pass (-want +got):\n%s\nlog:\n%s", d, logs.String())
	}
	for _, line := range []string{"keeper config read again", "keeper config not read; views keep the last one read", "keeper config gone"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no %q in the log:\n%s", line, logs.String())
		}
	}
}
