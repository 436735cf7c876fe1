//go:build e2e

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A streamed answer as the client of the front door saw it: its tokens in
// order (the fake numbers them: "tok0 ", "tok1 ", …, and a continuation
// goes on counting from its prefill, so a gap or a repeat shows), its ids,
// role chunks, finishes, whether it ended with [DONE], the continuation
// comments, an error event, and the longest pause between two tokens.
type streamSeen struct {
	tokens   []string
	ids      map[string]bool
	roles    int
	finishes int
	done     bool
	comments int
	errEvent string
	pause    time.Duration
	err      error
}

// streamChat posts one streamed chat request for model to the front door
// and reads it to its end; progress, if set, gets the token count as it
// grows.
func streamChat(base, model string, maxTokens int, progress func(int)) streamSeen {
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"count"}]}`, model, maxTokens)
	s := streamSeen{ids: map[string]bool{}}
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		s.err = err
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	last := time.Now()
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			s.comments++
		case line == "data: [DONE]":
			s.done = true
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				ID      string                    `json:"id"`
				Error   *struct{ Message string } `json:"error"`
				Choices []struct {
					Delta struct {
						Role    *string `json:"role"`
						Content *string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
				s.err = fmt.Errorf("event %q: %w", line, err)
				return s
			}
			if ev.Error != nil {
				s.errEvent = ev.Error.Message
			}
			if ev.ID != "" {
				s.ids[ev.ID] = true
			}
			for _, ch := range ev.Choices {
				if ch.Delta.Role != nil {
					s.roles++
				}
				if ch.Delta.Content != nil && *ch.Delta.Content != "" {
					s.pause = max(s.pause, time.Since(last))
					last = time.Now()
					s.tokens = append(s.tokens, strings.Fields(*ch.Delta.Content)...)
					if progress != nil {
						progress(len(s.tokens))
					}
				}
				if ch.FinishReason != nil {
					s.finishes++
				}
			}
		}
	}
	s.err = sc.Err()
	return s
}

// whole reports whether s is one unbroken answer of n tokens: tok0…tok(n-1)
// in order, one id, one role chunk, one finish, [DONE], no error.
func (s streamSeen) whole(n int) error {
	if s.err != nil || s.errEvent != "" {
		return fmt.Errorf("stream error %v, error event %q", s.err, s.errEvent)
	}
	for i, tok := range s.tokens {
		if tok != fmt.Sprintf("tok%d", i) {
			return fmt.Errorf("token %d is %q (a gap or a repeat): %v", i, tok, s.tokens)
		}
	}
	if len(s.tokens) != n || len(s.ids) != 1 || s.roles != 1 || s.finishes != 1 || !s.done {
		return fmt.Errorf("%d tokens (want %d), ids %v, %d role chunks, %d finishes, [DONE] %v",
			len(s.tokens), n, s.ids, s.roles, s.finishes, s.done)
	}
	return nil
}

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
	done := make(chan streamSeen, 1)
	go func() {
		done <- streamChat(w.url, "qwen-a", 200, func(n int) { mu.Lock(); seen = n; mu.Unlock() })
	}()
	w.waitFor("20 tokens streamed", 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return seen >= 20 })
	w.preemptFast(node)
	s := <-done
	if err := s.whole(200); err != nil {
		t.Fatalf("the client's answer: %v", err)
	}
	if s.comments != 1 {
		t.Errorf("%d continuation comments, want 1", s.comments)
	}
	t.Logf("one answer of 200 tokens across a preemption (%s → %s); the longest pause between two tokens %.2f s",
		node, w.tier("fast").Heads[0].Node, s.pause.Seconds())
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
	results := make(chan streamSeen, 12)
	for i := range 12 {
		go func() {
			results <- streamChat(w.url, "qwen-a", 120, func(n int) { mu.Lock(); progress[i] = n; mu.Unlock() })
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
		if err := (<-results).whole(120); err != nil {
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
