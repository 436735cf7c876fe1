//go:build e2e

package main

import (
	"context"
	"flag"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

var preemptCycles = flag.Int("e2e.cycles", 3, "preemption cycles per iteration of BenchmarkE2EPreemptCycles (the issue's figure is 20)")

// BenchmarkE2EPreemptCycles preempts a ready tier (nothing in flight)
// -e2e.cycles times in a row, releasing the requeued job after each, and
// reports: preemptor submitted → endpoint draining (an upper bound of
// PreemptTime → draining: PreemptTime comes after the submission), PreemptTime
// (whole seconds) → draining, preemptor submitted/PreemptTime → preemptor
// started, and the processes left behind and requeues missed over all cycles.
func BenchmarkE2EPreemptCycles(b *testing.B) {
	tr := setupE2E(b)
	tr.submit(b)
	tr.waitState(b, endpoints.StateReady, 90*time.Second)
	var m cycleFigures
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := 0; i < *preemptCycles; i++ {
			m.cycle(b, tr)
		}
	}
	b.StopTimer()
	m.report(b)
}

// cycleFigures collects the figures of preemption cycles.
type cycleFigures struct {
	submitToDraining, preemptToDraining, submitToPreemptor, preemptToPreemptor []time.Duration
	cycles, left, missed                                                       int
}

// cycle preempts the ready tier once and brings it back.
func (m *cycleFigures) cycle(b *testing.B, tr *e2eTier) {
	restarts := tr.job(b).Restarts
	w := tr.watchStop(tr.processPID(b, "server"))
	pre := preempt(b, tr.dir)
	st := w.wait(b, 60*time.Second)
	started := pre.startedAt(b)
	m.cycles++
	m.submitToDraining = append(m.submitToDraining, st.draining.Sub(pre.submitted))
	m.submitToPreemptor = append(m.submitToPreemptor, started.Sub(pre.submitted))
	if p := w.preemptTime(); !p.IsZero() {
		m.preemptToDraining = append(m.preemptToDraining, st.draining.Sub(p))
		m.preemptToPreemptor = append(m.preemptToPreemptor, started.Sub(p))
	}
	if !tr.restartsReach(restarts+1, 60*time.Second) {
		m.missed++
		b.Errorf("cycle %d: the job was not requeued", m.cycles)
	}
	if left := tr.fakes(); len(left) > 0 {
		m.left += len(left)
		b.Errorf("cycle %d: processes left once requeued: %v", m.cycles, left)
	}
	pre.cancel()
	tr.release(b)
	tr.waitState(b, endpoints.StateReady, 90*time.Second)
}

func (m *cycleFigures) report(b *testing.B) {
	b.ReportMetric(float64(m.cycles), "cycles")
	b.ReportMetric(medianMS(m.submitToDraining), "ms-submit-to-draining")
	b.ReportMetric(maxMS(m.submitToDraining), "ms-submit-to-draining-max")
	if len(m.preemptToDraining) > 0 {
		b.ReportMetric(medianMS(m.preemptToDraining), "ms-preempttime-to-draining")
		b.ReportMetric(medianMS(m.preemptToPreemptor), "ms-preempttime-to-preemptor")
	}
	b.ReportMetric(medianMS(m.submitToPreemptor), "ms-submit-to-preemptor")
	b.ReportMetric(float64(m.left), "processes-left")
	b.ReportMetric(float64(m.missed), "requeues-missed")
}

// BenchmarkE2EPreemptBaseline is Slurm's own path, for comparison: a plain
// requeueable job that does not hand its nodes over (a sleeping batch
// script, no steps) is preempted; the preemptor starts only once Slurm's
// grace has run out and the job is requeued.
func BenchmarkE2EPreemptBaseline(b *testing.B) {
	dir := setupE2E(b).dir
	var submitToPreemptor, preemptToPreemptor []time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		id := submitSleeper(b, dir)
		var preemptTime time.Time
		pre := preempt(b, dir)
		client := &slurm.Client{}
		e2eWaitFor(b, "PreemptTime", 60*time.Second, func() bool {
			j, err := client.ShowJob(context.Background(), id)
			preemptTime = j.PreemptTime
			return err == nil && !preemptTime.IsZero()
		})
		started := pre.startedAt(b)
		submitToPreemptor = append(submitToPreemptor, started.Sub(pre.submitted))
		preemptToPreemptor = append(preemptToPreemptor, started.Sub(preemptTime))
		pre.cancel()
		exec.Command("scancel", id).Run()
	}
	b.StopTimer()
	b.ReportMetric(medianMS(submitToPreemptor), "ms-submit-to-preemptor")
	b.ReportMetric(medianMS(preemptToPreemptor), "ms-preempttime-to-preemptor")
}

// submitSleeper submits a requeueable batch job of `sleep` on the three
// nodes and waits until it runs; the test's cleanup cancels it.
func submitSleeper(b *testing.B, dir string) string {
	b.Helper()
	out, err := exec.Command("sbatch", "--parsable", "--requeue", "-p", "gpu_ai", "-N3", "-w", "node[1-3]",
		"--job-name=e2e-sleeper", "--output="+filepath.Join(dir, "sleeper.out"), "--wrap", "exec sleep 600 # "+dir).CombinedOutput()
	if err != nil {
		b.Fatalf("sbatch sleeper: %v %s", err, out)
	}
	id := strings.TrimSpace(strings.Split(string(out), ";")[0])
	b.Cleanup(func() { exec.Command("scancel", id).Run() })
	e2eWaitFor(b, "the sleeper to run", 60*time.Second, func() bool {
		j, err := (&slurm.Client{}).ShowJob(context.Background(), id)
		return err == nil && j.State == slurm.JobRunning
	})
	return id
}

// restartsReach polls until the job's Restarts reach n; false after d.
func (tr *e2eTier) restartsReach(n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if j, err := (&slurm.Client{}).ShowJob(context.Background(), tr.jobID); err == nil && j.Restarts >= n {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func maxMS(ds []time.Duration) float64 {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return float64(m) / float64(time.Millisecond)
}
