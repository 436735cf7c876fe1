//go:build e2e

package main

import (
	"os/exec"
	"sync"
	"testing"
	"time"

	"slurm-llm/endpoints/front"
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

// BenchmarkE2EFrontContinuation is issue 20's figure, each case with the
// front door continuing streams and then without (continue = false: what
// a client got before), in the same world:
//   - drain: 4 streams of 200 tokens (20/s) on the fast tier's one head, a
//     science job takes its node while another is free, the drain's
//     deadline (budget 8 s) cuts them, the tier comes back on the free node;
//   - replicas: 12 streams of 120 tokens on three replicas (the same drain
//     budget), a science job takes one replica's node (moved at the next
//     token).
//
// It reports the streams cut each way and the longest pause a client saw
// between two tokens (20/s: 50 ms between tokens otherwise).
func BenchmarkE2EFrontContinuation(b *testing.B) {
	for _, c := range []struct {
		name    string
		opts    frontOpts
		streams int
		tokens  int
	}{
		{"drain", frontOpts{fastTokens: 200, fastRate: 20, drainBudget: "8s", noReasoning: true}, 4, 200},
		{"replicas", frontOpts{fastReplicas: 3, fastTokens: 120, fastRate: 20, drainBudget: "8s", noReasoning: true}, 12, 120},
	} {
		b.Run(c.name, func(b *testing.B) {
			w := newFrontWorld(b, c.opts)
			heads := max(c.opts.fastReplicas, 1)
			for i := 0; i < b.N; i++ {
				for _, on := range []bool{true, false} {
					w.waitFor("the fast tier's heads routed", 180*time.Second, func() bool { return len(w.tier("fast").Heads) == heads },
						func() string { return string(w.fd.StatusJSON()) })
					w.waitFor("the models read", 30*time.Second, func() bool { ms, _ := w.models(); return ms["qwen-a"] == "fast" })
					cfg := w.ucfg.Front
					ft := cfg.Tiers["fast"]
					ft.Continue = on
					cfg.Tiers = map[string]front.TierConfig{"fast": ft, "reasoning": cfg.Tiers["reasoning"]}
					w.fd.SetConfig(cfg)
					start := time.Now()
					cut, pause := w.cutStreams(b, c.streams, c.tokens)
					mode := map[bool]string{true: "on", false: "off"}[on]
					b.Logf("continuation %s: %d of %d streams cut; the longest pause between two tokens %.2f s (the cycle took %.1f s)",
						mode, cut, c.streams, pause.Seconds(), time.Since(start).Seconds())
					b.ReportMetric(float64(cut), "cut("+mode+")")
					if on {
						b.ReportMetric(pause.Seconds(), "pause-s")
						if cut > 0 {
							b.Errorf("%d streams cut with continuation on", cut)
						}
					}
				}
			}
		})
	}
}

// cutStreams runs n streams of tokens through the front door, takes the
// node of the head that serves most of them with a science job once each
// is 10 tokens in, waits for them, and cancels the science job. It
// returns how many did not come back whole and the longest pause.
func (w *frontWorld) cutStreams(b *testing.B, n, tokens int) (int, time.Duration) {
	var mu sync.Mutex
	progress := map[int]int{}
	results := make(chan fronttest.Seen, n)
	for i := range n {
		go func() {
			results <- fronttest.StreamChat(w.url, "qwen-a", tokens, func(k int) { mu.Lock(); progress[i] = k; mu.Unlock() })
		}()
	}
	w.waitFor("every stream 10 tokens in", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			if progress[i] < 10 {
				return false
			}
		}
		return true
	})
	busiest := w.tier("fast").Heads[0]
	for _, h := range w.tier("fast").Heads {
		if h.InFlight > busiest.InFlight {
			busiest = h
		}
	}
	science := w.preemptFast(busiest.Node)
	sent := time.Now()
	stop := make(chan struct{})
	var gone, back time.Duration // the preempted head out of the front door's table, and a head on another node in
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			on := false
			for _, h := range w.tier("fast").Heads {
				on = on || h.Node == busiest.Node
			}
			switch {
			case gone == 0 && !on:
				gone = time.Since(sent)
			case gone != 0 && back == 0 && len(w.tier("fast").Heads) >= 1:
				back = time.Since(sent)
			}
		}
	}()
	cut, pause := 0, time.Duration(0)
	for range n {
		s := <-results
		if err := s.Whole(tokens); err != nil {
			cut++
			b.Logf("a stream: %v", err)
		}
		pause = max(pause, s.Pause)
	}
	close(stop)
	b.Logf("science job's sbatch → the preempted head unrouted %.2f s, a head routed again %.2f s", gone.Seconds(), back.Seconds())
	_ = exec.Command("scancel", science).Run()
	w.waitFor("the science job gone", 60*time.Second, func() bool { return len(w.queue("vasp-"+w.id)) == 0 })
	return cut, pause
}
