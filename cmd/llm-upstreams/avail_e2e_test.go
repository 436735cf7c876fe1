//go:build e2e

package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
)

// A tier on the local cluster as the controller keeps it: the real
// llm-supervisor running the fake llama.cpp as a one-node tier, kept
// queued and released by an in-process keeper (its loop, release check
// every second as shipped), and routed by an in-process llm-upstreams
// watch (real squeue; nginx replaced by `true`: the route is read from
// watch's reports). Needs root and scripts/slurm-cluster.sh up.

var availCycles = flag.Int("avail.cycles", 10, "BenchmarkE2EPartialPreemption: preemption cycles")

type availWorld struct {
	*e2eController
	jobName string
	ucfg    config.Config

	mu       sync.Mutex
	last     tiers.Report
	routedAt map[string]time.Time // "job/restart" → first pass that routed that run
	released map[string][]time.Time
	reasons  []seenReason // the fast tier's view, each change of reason
}

// seenReason is a reason the tier's view gave from a pass on.
type seenReason struct {
	at     time.Time
	reason string
}

// newAvailWorld builds the binaries, writes the configs and starts the
// keeper and watch; everything stops (and the tier's jobs are cancelled)
// when the test ends.
func newAvailWorld(t testing.TB) *availWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e: needs root and the local cluster")
	}
	if err := exec.Command("scontrol", "ping").Run(); err != nil {
		t.Skipf("e2e: no Slurm controller: %v", err)
	}
	e, id := newE2EController(t, "avail")
	w := &availWorld{e2eController: e, jobName: "llm-avail-" + id, routedAt: map[string]time.Time{}, released: map[string][]time.Time{}}
	w.write("tier.toml", fakeTier(w.dir, freePort(t)))
	w.write("job.sh", fmt.Sprintf("#!/bin/bash\nexec %s/llm-supervisor run --config %s/tier.toml\n", w.dir, w.dir))
	w.write("keeper.toml", fmt.Sprintf(`state_dir = "%s/keeper"
[tiers.fast]
job_name = %q
script = "%s/job.sh"
sbatch_args = ["-p", "gpu_ai", "-N1", "--requeue", "--open-mode=append", "-o", "%s/job.out", "-D", %q]
backoff_initial = "1h"
backoff_max = "1h"
max_submits_per_hour = 20
`, w.dir, w.jobName, w.dir, w.dir, w.dir))
	w.write("upstreams.toml", fmt.Sprintf(`endpoint_dir = "%[1]s/endpoints"
output_dir = "%[1]s/out"
lock_file = "%[1]s/lock"
state_dir = "%[1]s/state"
keeper_config = "%[1]s/keeper.toml"
allowed_owners = ["0"]
allowed_networks = ["127.0.0.0/8", "10.77.0.0/16"] # loopback and netns clusters (scripts/slurm-cluster.sh)
[tiers.fast]
job_name = %[2]q
[nginx]
test = ["true"]
reload = ["true"]
`, w.dir, w.jobName))
	w.ucfg = w.start(&releaseSpy{w: w}, w.observe)
	t.Cleanup(w.close)
	return w
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// close cancels the tier's and the test's jobs, waits until they are gone,
// then stops the keeper and watch.
func (w *availWorld) close() {
	if !w.shutdown(w.jobName, "vasp-"+w.jobName) {
		b, _ := os.ReadFile(filepath.Join(w.dir, "job.out"))
		w.t.Logf("job output (last 3000 bytes):\n%s", tail(b, 3000))
		return
	}
	os.RemoveAll(w.dir)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// observe keeps watch's last report and when each run was first routed.
func (w *availWorld) observe(rep tiers.Report, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = rep
	for _, v := range rep.Views {
		if v.Tier == "fast" && (len(w.reasons) == 0 || w.reasons[len(w.reasons)-1].reason != v.Reason) {
			w.reasons = append(w.reasons, seenReason{at, v.Reason})
		}
	}
	for _, d := range rep.Decisions {
		key := fmt.Sprintf("%s/%d", d.Endpoint.JobID, d.Endpoint.RestartCount)
		if _, seen := w.routedAt[key]; d.Live && !seen {
			w.routedAt[key] = at
		}
	}
}

// view is watch's last view of the tier.
func (w *availWorld) view() tiers.TierView {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.last.Views {
		if v.Tier == "fast" {
			return v
		}
	}
	return tiers.TierView{}
}

func (w *availWorld) routed(job string, restart int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.routedAt[fmt.Sprintf("%s/%d", job, restart)]
	return t, ok
}

// releaseSpy timestamps the keeper's "released" lines.
type releaseSpy struct{ w *availWorld }

func (s *releaseSpy) Write(p []byte) (int, error) {
	line := string(p)
	if strings.Contains(line, "released requeued job") {
		if i := strings.Index(line, "job_id="); i >= 0 {
			id := strings.Fields(line[i+len("job_id="):])[0]
			s.w.mu.Lock()
			s.w.released[id] = append(s.w.released[id], time.Now())
			s.w.mu.Unlock()
		}
	}
	return len(p), nil
}

// jobs lists the tier's jobs; more than one is a duplicate.
func (w *availWorld) jobs() []slurm.QueuedJob { return w.queue(w.jobName) }

// up waits until the tier runs and is routed, and returns its job.
func (w *availWorld) up(d time.Duration) slurm.QueuedJob {
	w.t.Helper()
	var job slurm.QueuedJob
	w.waitFor("the tier running and routed", d, func() bool {
		js := w.jobs()
		if len(js) != 1 || js[0].State != slurm.JobRunning {
			return false
		}
		job = js[0]
		_, ok := w.routed(job.ID, job.Restarts)
		return ok
	})
	return job
}

// readyFile reports whether the tier's endpoint file is job's, at restart n, ready.
func (w *availWorld) readyFile(job string, n int) bool {
	b, err := os.ReadFile(filepath.Join(w.dir, "endpoints", endpoints.FileName("fast", job)))
	if err != nil {
		return false
	}
	e, err := endpoints.Parse(b)
	return err == nil && e.RestartCount == n && e.State == endpoints.StateReady
}

// preempt submits a science job on nodes (sbatch -w) and returns its id.
func (w *availWorld) preempt(args ...string) string {
	w.t.Helper()
	argv := append([]string{"--parsable", "-p", "gpu_vasp", "-J", "vasp-" + w.jobName, "-o", "/dev/null", "-D", w.dir}, args...)
	out, err := exec.Command("sbatch", append(argv, "--wrap", "exec sleep 1000")...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("sbatch %v: %v %s", argv, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (w *availWorld) cancel(id string) {
	w.t.Helper()
	if err := w.c.Cancel(context.Background(), id); err != nil {
		w.t.Fatal(err)
	}
	w.waitFor("job "+id+" gone", 90*time.Second, func() bool {
		st, err := w.c.JobStates(context.Background(), []string{id})
		return err == nil && (st[id] == "" || st[id] == slurm.JobCancelled || st[id] == slurm.JobCompleted)
	})
}

// cycleFigures is one partial preemption.
type cycleFigures struct {
	from, to         string
	preempted        time.Time // the science job submitted
	requeued         time.Time // the requeue seen in squeue
	requeueToRelease time.Duration
	requeueToReady   time.Duration
	requeueToRouted  time.Duration
	beforeSlurmsHold bool // running again before the requeue's EligibleTime
	lost, duplicates bool
}

// partialCycle preempts the tier's node with a one-node science job while
// other nodes are free and measures how fast the tier comes back elsewhere.
func (w *availWorld) partialCycle(job slurm.QueuedJob) (cycleFigures, slurm.QueuedJob) {
	w.t.Helper()
	f := cycleFigures{from: job.NodeList, preempted: time.Now()}
	vasp := w.preempt("-N1", "--exclusive", "-w", job.NodeList)
	var requeued time.Time
	var hold time.Time
	w.waitFor("the requeue", 90*time.Second, func() bool {
		js := w.jobs()
		if len(js) > 1 {
			f.duplicates = true
		}
		if len(js) == 0 {
			f.lost = true
			return true
		}
		j := js[0]
		if j.Restarts > job.Restarts && (j.State == slurm.JobCompleting || j.State == slurm.JobPending) {
			requeued = time.Now()
			f.requeued = requeued
			return true
		}
		return false
	})
	if f.lost {
		return f, job
	}
	var next slurm.QueuedJob
	ready := w.waitFor("the tier ready again", 150*time.Second, func() bool {
		js := w.jobs()
		if len(js) > 1 {
			f.duplicates = true
		}
		for _, j := range js {
			if j.ID != job.ID {
				continue
			}
			if j.State == slurm.JobPending && j.Reason == "BeginTime" && hold.IsZero() {
				hold = j.Eligible
			}
			if j.State == slurm.JobRunning {
				next = j
			}
		}
		if len(js) == 0 || (len(js) == 1 && js[0].ID != job.ID) || (len(js) == 1 && js[0].State == slurm.JobFailed) {
			f.lost = true
			return true
		}
		return next.ID != "" && w.readyFile(job.ID, job.Restarts+1)
	})
	if f.lost {
		return f, job
	}
	f.requeueToReady = ready.Sub(requeued)
	routedAt := w.waitFor("watch routing the new run", 30*time.Second, func() bool {
		_, ok := w.routed(job.ID, job.Restarts+1)
		return ok
	})
	if at, ok := w.routed(job.ID, job.Restarts+1); ok {
		routedAt = at
	}
	f.requeueToRouted = routedAt.Sub(requeued)
	w.mu.Lock()
	if rs := w.released[job.ID]; len(rs) > 0 && rs[len(rs)-1].After(requeued) {
		f.requeueToRelease = rs[len(rs)-1].Sub(requeued)
	}
	w.mu.Unlock()
	f.beforeSlurmsHold = hold.IsZero() || time.Now().Before(hold)
	f.to = next.NodeList
	w.cancel(vasp)
	return f, next
}

// One partial preemption: a one-node science job takes the tier's node
// while the other nodes are free; the keeper releases the requeued job and
// the tier is routed again on another node, before Slurm's own 121 s hold
// would have ended, with the same job id (nothing lost, no duplicate).
func TestE2EPartialPreemptionComesBackElsewhere(t *testing.T) {
	w := newAvailWorld(t)
	job := w.up(120 * time.Second)
	f, next := w.partialCycle(job)
	t.Logf("%s -> %s: requeue → release %v, → ready %v, → routed %v", f.from, f.to, f.requeueToRelease, f.requeueToReady, f.requeueToRouted)
	switch {
	case f.lost:
		t.Fatal("the tier's job was lost")
	case f.duplicates:
		t.Error("more than one job of the tier at once")
	case f.to == f.from:
		t.Errorf("back on %s, the preempted node", f.to)
	case !f.beforeSlurmsHold:
		t.Error("running again only after Slurm's own hold: not released by the keeper")
	case f.requeueToRelease == 0:
		t.Error("no release by the keeper")
	}
	if next.Restarts != job.Restarts+1 {
		t.Errorf("restarts %d → %d", job.Restarts, next.Restarts)
	}
	// Regression (issue 21): right after the preemption the 503 said
	// "starting: loading the model" (a listing from before the requeue)
	// until Slurm's answer caught up. Until the requeue, nothing starts.
	w.mu.Lock()
	defer w.mu.Unlock()
	var seen []string
	for _, r := range w.reasons {
		if !r.at.Before(f.preempted) && r.at.Before(f.requeued) {
			seen = append(seen, fmt.Sprintf("+%.2fs %s", r.at.Sub(f.preempted).Seconds(), r.reason))
			if r.reason == tiers.ReasonStarting {
				t.Errorf("the view said %q before the requeue (reasons seen: %q)", r.reason, seen)
			}
		}
	}
	t.Logf("reasons from the science job's sbatch to the requeue (%.2fs): %q", f.requeued.Sub(f.preempted).Seconds(), seen)
}

// BenchmarkE2EPartialPreemption prints how fast the tier is back after a
// partial preemption (median of -avail.cycles, 10 by default; target < 5 s
// from the requeue to ready), and checks each cycle for a lost or
// duplicated job (-avail.cycles=50: "release never early").
func BenchmarkE2EPartialPreemption(b *testing.B) {
	w := newAvailWorld(b)
	job := w.up(120 * time.Second)
	var ready, routed, release []time.Duration
	lost, dups, late := 0, 0, 0
	for i := 0; i < *availCycles; i++ {
		f, next := w.partialCycle(job)
		b.Logf("cycle %2d: %s -> %s  release %6.2fs  ready %6.2fs  routed %6.2fs", i+1, f.from, f.to,
			f.requeueToRelease.Seconds(), f.requeueToReady.Seconds(), f.requeueToRouted.Seconds())
		if f.lost {
			lost++
			break
		}
		if f.duplicates {
			dups++
		}
		if !f.beforeSlurmsHold {
			late++
		}
		ready, routed, release = append(ready, f.requeueToReady), append(routed, f.requeueToRouted), append(release, f.requeueToRelease)
		job = next
	}
	b.ReportMetric(float64(len(ready)), "cycles")
	b.ReportMetric(median(ready).Seconds(), "s-requeue-to-ready-median")
	b.ReportMetric(maxOf(ready).Seconds(), "s-requeue-to-ready-max")
	b.ReportMetric(median(routed).Seconds(), "s-requeue-to-routed-median")
	b.ReportMetric(median(release).Seconds(), "s-requeue-to-release-median")
	b.ReportMetric(float64(lost), "jobs-lost")
	b.ReportMetric(float64(dups), "duplicates")
	b.ReportMetric(float64(late), "not-released")
}

// BenchmarkE2EPreemptETA prints how close the 503's expected return is to
// the tier's actual return when a science job with a 90 s time limit takes
// every node (target: within 20 %).
func BenchmarkE2EPreemptETA(b *testing.B) {
	w := newAvailWorld(b)
	w.up(120 * time.Second)
	pre := time.Now()
	vasp := w.preempt("-N3", "--exclusive", "-t", "1:30")
	var first, last *time.Time
	var firstAt time.Time
	var preemptor string
	w.waitFor("an estimate in the 503", 120*time.Second, func() bool {
		v := w.view()
		if v.State != tiers.StateRouted && v.ExpectedBack != nil {
			first, firstAt = v.ExpectedBack, time.Now()
			if v.Preemptor != nil {
				preemptor = v.Preemptor.Job
			}
			return true
		}
		return false
	})
	seen := ""
	logView := func(v tiers.TierView) {
		s := fmt.Sprintf("%s/%s job %s %s (%s)", v.State, v.Reason, v.Job, v.JobState, v.JobReason)
		if v.Preemptor != nil && v.Preemptor.End != nil {
			s += fmt.Sprintf(", preemptor %s ends +%.1fs", v.Preemptor.Job, v.Preemptor.End.Sub(pre).Seconds())
		}
		if v.ExpectedBack != nil {
			s += fmt.Sprintf(", expected back +%.1fs", v.ExpectedBack.Sub(pre).Seconds())
		}
		s += fmt.Sprintf(", start to ready %v", v.StartToReady)
		if s != seen {
			b.Logf("+%5.1fs %s", time.Since(pre).Seconds(), s)
			seen = s
		}
	}
	back := w.waitFor("the tier routed again", 6*time.Minute, func() bool {
		v := w.view()
		logView(v)
		if v.State == tiers.StateRouted {
			return true
		}
		if v.ExpectedBack != nil {
			last = v.ExpectedBack
		}
		return false
	})
	if last == nil {
		last = first
	}
	outage := back.Sub(pre)
	errFirst, errLast := back.Sub(*first), back.Sub(*last)
	b.Logf("science job %s (preemptor found: %q), submitted %s; first estimate at +%.1fs: back at +%.1fs; "+
		"last estimate: +%.1fs; actual return +%.1fs", vasp, preemptor, pre.Format(time.TimeOnly), firstAt.Sub(pre).Seconds(),
		first.Sub(pre).Seconds(), last.Sub(pre).Seconds(), outage.Seconds())
	b.ReportMetric(outage.Seconds(), "s-outage")
	b.ReportMetric(errFirst.Seconds(), "s-actual-minus-first-estimate")
	b.ReportMetric(errLast.Seconds(), "s-actual-minus-last-estimate")
	b.ReportMetric(100*abs(errFirst).Seconds()/outage.Seconds(), "%-error-of-outage")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
