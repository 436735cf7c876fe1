//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints/front/fronttest"
)

// realLlama is a real llama.cpp build and a model (the real lane, README;
// faketest.Real).
type realLlama struct{ bin, model string }

// needRealLlama returns the build the environment names, or skips.
func needRealLlama(t testing.TB) *realLlama {
	t.Helper()
	bin, model := faketest.NeedReal(t, "llama-server")
	return &realLlama{bin: bin, model: model}
}

// tier is frontTier's one-node tier with the build's llama-server as its
// head (the build's libraries in its environment).
func (r *realLlama) tier(dir, tier string, port int, headArgs ...string) string {
	s := frontTier(dir, tier, port, headArgs...)
	s = strings.Replace(s, strconv.Quote(dir+"/fake-llama")+", "+strconv.Quote("server"), strconv.Quote(filepath.Join(r.bin, "llama-server")), 1)
	return strings.Replace(s, "[head]\n", fmt.Sprintf("[head]\nenv = { LD_LIBRARY_PATH = %q }\n", r.bin), 1)
}

// rawSeen is a streamed /completion as its client saw it.
type rawSeen struct {
	text      strings.Builder
	events    int
	comments  []string
	cutAt     int       // events before the first comment (the continuation's)
	commentAt time.Time // when it came
	errEvent  string
	last      map[string]json.RawMessage // the "stop": true event
	pause     time.Duration              // the longest between two events
	streamErr error
}

// curlCompletion streams body to base's /completion with curl, as a
// client would, calling progress with the events so far.
func curlCompletion(ctx context.Context, base string, body []byte, progress func(int)) *rawSeen {
	s := &rawSeen{}
	err := fronttest.Curl(ctx, base+"/completion", body, func(out io.Reader) error {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		last := time.Now()
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				if len(s.comments) == 0 {
					s.cutAt, s.commentAt = s.events, time.Now()
				}
				s.comments = append(s.comments, line)
			case strings.HasPrefix(line, "data: "):
				var ev map[string]json.RawMessage
				if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
					s.streamErr = fmt.Errorf("event %q: %w", line, err)
					continue
				}
				if ev["error"] != nil {
					s.errEvent = string(ev["error"])
					continue
				}
				var content string
				_ = json.Unmarshal(ev["content"], &content)
				s.text.WriteString(content)
				s.events++
				s.pause, last = max(s.pause, time.Since(last)), time.Now()
				if string(ev["stop"]) == "true" {
					s.last = ev
				}
				if progress != nil {
					progress(s.events)
				}
			}
		}
		return sc.Err()
	})
	if err != nil && s.streamErr == nil {
		s.streamErr = err
	}
	return s
}

// TestE2ERealLlamaFrontResumesACutStreamFromItsSavedSlot (issue 39's goal,
// the real lane): the fast tier as one real llama-server that saves its
// slots at the drain; curl streams a greedy /completion of a 1,802-token
// prompt through the front door; a science job preempts the head's node
// (SIGTERM through Slurm). The front door leaves the stream, the drain
// saves the slot, the tier comes back on the free node, and its head
// restores the slot before the continuation: the client's answer is byte
// for byte the uncut answer (the same request asked of the head before),
// and the continuation evaluated at most 2 % of its prompt (timings.prompt_n
// of the last event) instead of all of it.
func TestE2ERealLlamaFrontResumesACutStreamFromItsSavedSlot(t *testing.T) {
	rl := needRealLlama(t)
	// The stream must outlast Slurm's decision to preempt (up to a
	// scheduler pass, 60 s): -t 1 and a long answer (the model's context
	// raised from its 2,048: a random model, nothing to lose).
	w := newFrontWorld(t, frontOpts{noReasoning: true, slotSave: true, real: rl, realArgs: []string{
		"-np", "2", "-c", "32768", "-t", "1", "--override-kv", "llama.context_length=int:16384"}})
	w.waitFor("the fast tier routed", 240*time.Second, func() bool { return len(w.tier("fast").Heads) == 1 },
		func() string { return string(w.fd.StatusJSON()) })
	w.waitFor("the models read", 30*time.Second, func() bool { ms, _ := w.models(); return ms["qwen-a"] == "fast" })
	head := w.tier("fast").Heads[0]

	const nPredict = 14000
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 150)
	// cache_prompt false: the uncut answer and the cut one each evaluate
	// the prompt in batches, the same arithmetic (a prompt taken from a
	// slot's cache re-evaluates its last token alone, which the random
	// model's near ties can tell apart thousands of tokens later).
	req := map[string]any{"model": "qwen-a", "prompt": prompt, "n_predict": nPredict, "temperature": 0, "stream": true, "cache_prompt": false}
	body, _ := json.Marshal(req)

	// The uncut answer, asked of the head itself.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ref := curlCompletion(ctx, "http://"+head.Addr, body, nil)
	if ref.streamErr != nil || ref.errEvent != "" || ref.last == nil {
		t.Fatalf("the uncut answer from the head: %v, error event %s, ended %v", ref.streamErr, ref.errEvent, ref.last != nil)
	}
	var refTimings struct {
		PromptN int `json:"prompt_n"`
	}
	_ = json.Unmarshal(ref.last["timings"], &refTimings)
	var promptTokens, refPredicted int
	_ = json.Unmarshal(ref.last["tokens_evaluated"], &promptTokens)
	_ = json.Unmarshal(ref.last["tokens_predicted"], &refPredicted)
	t.Logf("the uncut answer: %d events, %d bytes; its prompt %d tokens (%d evaluated)", ref.events, ref.text.Len(), promptTokens, refTimings.PromptN)

	var progress atomic.Int64
	done := make(chan *rawSeen, 1)
	go func() { done <- curlCompletion(ctx, w.url, body, func(n int) { progress.Store(int64(n)) }) }()
	w.waitFor("the stream 300 tokens in", 120*time.Second, func() bool { return progress.Load() >= 300 })
	preempted := time.Now()
	science := w.preemptFast(head.Node)
	t.Cleanup(func() { _ = exec.Command("scancel", science).Run() })
	var got *rawSeen
	select {
	case got = <-done:
	case <-time.After(6 * time.Minute):
		t.Fatal("the stream did not end")
	}
	if got.streamErr != nil || got.errEvent != "" || got.last == nil {
		t.Fatalf("the cut stream: %v, error event %s, ended %v; comments %q", got.streamErr, got.errEvent, got.last != nil, got.comments)
	}
	var timings struct {
		PromptN int `json:"prompt_n"`
	}
	_ = json.Unmarshal(got.last["timings"], &timings)
	var predicted int
	_ = json.Unmarshal(got.last["tokens_predicted"], &predicted)
	accessLine := ""
	for _, l := range w.accessLines() {
		if strings.Contains(l, "restored=") && strings.Contains(l, "/completion") {
			accessLine = l
		}
	}
	t.Logf("through the door, cut after %d tokens, %.1f s after the science job's submission: %d events, %d bytes, tokens_predicted %d; the continuation evaluated %d prompt tokens of %d (%.2f %%); the longest pause %.2f s; comments %q; access: %s",
		got.cutAt, got.commentAt.Sub(preempted).Seconds(), got.events, got.text.Len(), predicted, timings.PromptN, promptTokens+predicted, 100*float64(timings.PromptN)/float64(promptTokens), got.pause.Seconds(), got.comments, accessLine)
	if len(got.comments) == 0 {
		t.Fatalf("the stream was not continued (no continuation comment): the preemption came after its end?")
	}
	if n := restoredContinuations(t, w); n < 1 {
		t.Errorf("llm_front_continuations_total{restored=\"true\"} = %v, want 1: the slot saved at the drain was not restored", n)
	}
	if got.text.String() != ref.text.String() {
		a, b := got.text.String(), ref.text.String()
		i := 0
		for i < min(len(a), len(b)) && a[i] == b[i] {
			i++
		}
		t.Errorf("the continued answer differs from the uncut one at byte %d of %d/%d: %q vs %q", i, len(a), len(b),
			a[max(i-40, 0):min(i+40, len(a))], b[max(i-40, 0):min(i+40, len(b))])
	}
	if predicted != refPredicted {
		t.Errorf("tokens_predicted %d, want the whole answer's %d", predicted, refPredicted)
	}
	if limit := promptTokens / 50; timings.PromptN > limit {
		t.Errorf("the continuation evaluated %d prompt tokens, over 2 %% of the prompt's %d (%d)", timings.PromptN, promptTokens, limit)
	}
	if des, _ := os.ReadDir(filepath.Join(w.dir, "kv")); len(des) > 0 {
		var names []string
		for _, d := range des {
			names = append(names, d.Name())
		}
		t.Logf("kv directory: %v", names)
	}
}

// accessLines are the front door's access log lines so far.
func (w *frontWorld) accessLines() []string {
	a := w.access
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.lines...)
}
