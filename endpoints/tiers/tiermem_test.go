package tiers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

func TestObserveTier(t *testing.T) {
	ready := func(started time.Time, run string) endpoints.Decision {
		d := fileIn(endpoints.StateReady, "", started)
		d.Live, d.Endpoint.RunID = true, run
		return d
	}
	watchStart := t0.Add(-time.Hour)
	m := tierMem{}
	step := func(in observeInput) {
		in.WatchStart, in.Samples = watchStart, 3
		if in.Now.IsZero() {
			in.Now = t0
		}
		m = observeTier(m, in)
	}
	// Running on node1, then preempted: Slurm's PreemptTime marks it.
	step(observeInput{Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.NodeList = "node1" })}})
	step(observeInput{Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) {
		j.NodeList, j.Preempt = "node1", t0.Add(-3*time.Second)
	})}})
	want := tierMem{Nodes: "node1", NodesJob: "7", Partition: "gpu_ai", Preempted: &preemptMark{Job: "7", At: t0.Add(-3 * time.Second), Restarts: 1}}
	if d := cmp.Diff(want, m); d != "" {
		t.Fatalf("after the preemption (-want +got):\n%s", d)
	}
	// Routed again 25 s after its new run started: one sample, the mark cleared.
	r1 := ready(t0.Add(-25*time.Second), "aaaa")
	step(observeInput{Own: true, Live: []endpoints.Decision{r1}, Decisions: []endpoints.Decision{r1}})
	if m.Preempted != nil || len(m.Ready) != 1 || m.Ready[0] != 25 {
		t.Fatalf("after routing: %+v; want one 25 s sample and no mark", m)
	}
	// The same run routed on later passes: no new sample.
	step(observeInput{Own: true, Live: []endpoints.Decision{r1}, Now: t0.Add(time.Minute)})
	if len(m.Ready) != 1 {
		t.Fatalf("the same run sampled twice: %v", m.Ready)
	}
	// A run that started before this process: its start was not seen.
	old := ready(watchStart.Add(-time.Minute), "bbbb")
	step(observeInput{Own: true, Live: []endpoints.Decision{old}})
	if len(m.Ready) != 1 {
		t.Fatalf("a run older than the watcher was sampled: %v", m.Ready)
	}
	// A draining file that says "preempted" marks it too; only the last 3
	// samples are kept.
	step(observeInput{Decisions: []endpoints.Decision{fileIn(endpoints.StateDraining, "preempted", t0)}})
	if m.Preempted == nil || m.Preempted.At != t0 {
		t.Fatalf("draining for a preemption not marked: %+v", m.Preempted)
	}
	for i, run := range []string{"c", "d", "e"} {
		r := ready(t0.Add(-time.Duration(10+i)*time.Second), run)
		step(observeInput{Own: true, Live: []endpoints.Decision{r}})
	}
	if d := cmp.Diff([]float64{10, 11, 12}, m.Ready); d != "" {
		t.Errorf("samples (-want +got):\n%s", d)
	}
	if got := m.medianReady(); got != 11*time.Second {
		t.Errorf("median %v, want 11s", got)
	}
}

func TestMemRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if mem, err := loadMem(dir); err != nil || len(mem) != 0 {
		t.Fatalf("no file: %v %v", mem, err)
	}
	want := map[string]tierMem{"fast": {Ready: []float64{3.5}, State: StateRouted, Since: t0}}
	if err := saveMem(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadMem(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}
