//go:build e2e

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"slurm-llm/endpoints/front/fronttest"
	"slurm-llm/endpoints/kvsave"
)

// restoredContinuations is llm_front_continuations_total{restored="true"}.
func restoredContinuations(t testing.TB, w *frontWorld) float64 {
	t.Helper()
	mfs, err := w.fd.Metrics().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "llm_front_continuations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "restored" && l.GetValue() == "true" {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestE2EFrontRestoresASlotSavedAtTheDrain (issue 39): the fast tier as a
// single-model head that saves its slots at the drain, the keeper
// releasing, a free node; curl streams a 700-token chat (35 s) through the
// front door; a science job takes the tier's node. The drain says
// draining; the front door leaves the stream (no other head: it is held),
// the head's slot goes idle and the supervisor saves it; the tier comes
// back on the free node, whose head restores the slot before the
// continuation: the client gets one whole answer, the continuation is
// counted restored, the saved file is gone (removed once restored).
func TestE2EFrontRestoresASlotSavedAtTheDrain(t *testing.T) {
	w := newFrontWorld(t, frontOpts{fastTokens: drainTokens, fastRate: drainRate, noReasoning: true, slotSave: true})
	w.waitFor("the fast tier routed", 180*time.Second, func() bool { return len(w.tier("fast").Heads) == 1 },
		func() string { return string(w.fd.StatusJSON()) })
	w.waitFor("the models read", 30*time.Second, func() bool { ms, _ := w.models(); return ms["qwen-a"] == "fast" })
	var progress atomic.Int64
	done := make(chan fronttest.Seen, 1)
	go func() {
		done <- fronttest.CurlStream(w.url, "qwen-a", drainTokens, func(n int) { progress.Store(int64(n)) })
	}()
	w.waitFor("the stream 20 tokens in", 60*time.Second, func() bool { return progress.Load() >= 20 })
	was := w.tier("fast").Heads[0].Node
	science := w.preemptFast(was)
	t.Cleanup(func() { _ = exec.Command("scancel", science).Run() })
	var s fronttest.Seen
	select {
	case s = <-done:
	case <-time.After(240 * time.Second):
		t.Fatal("the stream did not end")
	}
	if err := s.Whole(drainTokens); err != nil {
		t.Errorf("the answer is not whole: %v (error event %q)", err, s.ErrEvent)
	}
	t.Logf("%d tokens, the longest pause between two tokens %.2f s", len(s.Tokens), s.Pause.Seconds())
	if n := restoredContinuations(t, w); n < 1 {
		t.Errorf("llm_front_continuations_total{restored=\"true\"} = %v, want 1: the slot saved at the drain was not restored", n)
	}
	entries, _ := kvsave.Entries(filepath.Join(w.dir, "kv"))
	if len(entries) != 0 {
		t.Errorf("saved slots left after their restore: %+v", entries)
	}
	if des, _ := os.ReadDir(filepath.Join(w.dir, "kv")); len(des) > 0 {
		var names []string
		for _, d := range des {
			names = append(names, d.Name())
		}
		t.Logf("kv directory: %v", names)
	}
}
