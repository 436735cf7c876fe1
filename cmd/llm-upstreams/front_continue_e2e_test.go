//go:build e2e

package main

import (
	"sync"
	"testing"
	"time"

	"slurm-llm/endpoints/front/fronttest"
)

// TestE2EFrontContinuesAStreamCutByADrain is issue 20's A4-style case: a
// long stream (200 tokens at 20/s) through the front door; a science job
// takes the fast tier's node while another is free; the drain's deadline
// (budget 8 s: 1 s for requests in flight) cuts the stream; the tier comes
// back on the free node; the front door, holding meanwhile, continues the
// stream there. The client sees one unbroken answer: the text before the
// cut byte for byte, nothing repeated, one finish and [DONE].
func TestE2EFrontContinuesAStreamCutByADrain(t *testing.T) {
	w := newFrontWorld(t, frontOpts{fastTokens: 200, fastRate: 20, drainBudget: "8s"})
	w.up(1)
	node := w.tier("fast").Heads[0].Node
	var mu sync.Mutex
	seen := 0
	done := make(chan fronttest.Seen, 1)
	go func() {
		done <- fronttest.StreamChat(w.url, "qwen-a", 200, func(n int) { mu.Lock(); seen = n; mu.Unlock() })
	}()
	w.waitFor("20 tokens streamed", 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return seen >= 20 })
	w.preemptFast(node)
	s := <-done
	if err := s.Whole(200); err != nil {
		t.Fatalf("the client's answer: %v", err)
	}
	if s.Comments != 1 {
		t.Errorf("%d continuation comments, want 1", s.Comments)
	}
	t.Logf("one answer of 200 tokens across a preemption (%s → %s); the longest pause between two tokens %.2f s",
		node, w.tier("fast").Heads[0].Node, s.Pause.Seconds())
}

// TestE2EFrontMovesStreamsOffAPreemptedReplica: the fast tier as three
// replicas, 12 long streams through the front door (least in flight: 4 on
// each); a science job takes one replica's node. Its endpoint drains, and
// its 4 streams move at the next token to the other replicas: 0 streams
// cut, each one unbroken answer.
func TestE2EFrontMovesStreamsOffAPreemptedReplica(t *testing.T) {
	w := newFrontWorld(t, frontOpts{fastReplicas: 3, fastTokens: 120, fastRate: 20, noReasoning: true})
	w.waitFor("three fast replicas routed", 120*time.Second, func() bool { return len(w.tier("fast").Heads) == 3 },
		func() string { return string(w.fd.StatusJSON()) })
	w.waitFor("the models read", 30*time.Second, func() bool { ms, _ := w.models(); return ms["qwen-a"] == "fast" })
	var mu sync.Mutex
	progress := map[int]int{}
	results := make(chan fronttest.Seen, 12)
	for i := range 12 {
		go func() {
			results <- fronttest.StreamChat(w.url, "qwen-a", 120, func(n int) { mu.Lock(); progress[i] = n; mu.Unlock() })
		}()
	}
	w.waitFor("every stream 10 tokens in", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range 12 {
			if progress[i] < 10 {
				return false
			}
		}
		return true
	})
	victim := w.tier("fast").Heads[0]
	moved0 := countMetric(t, w.fd, "llm_front_continuations_total")
	w.preemptFast(victim.Node)
	cut := 0
	for range 12 {
		if err := (<-results).Whole(120); err != nil {
			cut++
			t.Errorf("a stream: %v", err)
		}
	}
	moved := countMetric(t, w.fd, "llm_front_continuations_total") - moved0
	t.Logf("12 streams, a science job on %s: %d cut, %v continuations", victim.Node, cut, moved)
	if moved < 1 {
		t.Errorf("no stream was moved off the preempted replica (%v continuations)", moved)
	}
}
