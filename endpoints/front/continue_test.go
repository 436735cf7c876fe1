package front

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// answer is a streamed chat answer as the client saw it.
type answer struct {
	ids, models map[string]bool
	text        string   // the content deltas, in order
	roles       int      // role chunks
	finishes    []string // finish reasons
	usage       map[string]int
	done        bool   // [DONE]
	comments    int    // ": …" lines (the continuation's)
	errEvent    string // an error event's message
}

// streamAnswer posts a streamed chat request (extra JSON fields in extra)
// and reads the whole answer.
func (r *rig) streamAnswer(path, extra string, messages string) (answer, error) {
	body := fmt.Sprintf(`{"model":"qwen-a","stream":true%s,"messages":%s}`, extra, messages)
	if path == "/completion" {
		body = fmt.Sprintf(`{"model":"qwen-a","stream":true%s,"prompt":"count "}`, extra)
	}
	resp, err := http.Post(r.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{ids: map[string]bool{}, models: map[string]bool{}}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			a.comments++
		case line == "data: [DONE]":
			a.done = true
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				ID      string `json:"id"`
				Model   string `json:"model"`
				Content string `json:"content"`
				Stop    bool   `json:"stop"`
				Error   *struct {
					Message string `json:"message"`
				} `json:"error"`
				Choices []struct {
					Delta struct {
						Role    *string `json:"role"`
						Content *string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage map[string]int `json:"usage"`
			}
			if json.Unmarshal([]byte(line[6:]), &ev) != nil {
				return a, fmt.Errorf("bad event %q", line)
			}
			if ev.Error != nil {
				a.errEvent = ev.Error.Message
				continue
			}
			if ev.ID != "" {
				a.ids[ev.ID] = true
			}
			if ev.Model != "" {
				a.models[ev.Model] = true
			}
			a.text += ev.Content
			if ev.Stop {
				a.finishes = append(a.finishes, "stop")
			}
			for _, ch := range ev.Choices {
				if ch.Delta.Role != nil {
					a.roles++
				}
				if ch.Delta.Content != nil {
					a.text += *ch.Delta.Content
				}
				if ch.FinishReason != nil {
					a.finishes = append(a.finishes, *ch.FinishReason)
				}
			}
			if ev.Usage != nil {
				a.usage = ev.Usage
			}
		}
	}
	return a, err
}

const userMsg = `[{"role":"user","content":"count"}]`

// waitFirstToken waits until the one stream's first token reached the
// client (its time to first token observed as the splicer took it).
func (r *rig) waitFirstToken() {
	r.t.Helper()
	waitFor(r.t, "the first token at the client", func() bool {
		var m dto.Metric
		_ = r.s.metrics.ttft.WithLabelValues("fast", "qwen-a").(prometheus.Histogram).Write(&m)
		return m.GetHistogram().GetSampleCount() == 1
	})
}

// draining is the decision on tier fast's job's file saying it drains
// (preempted) at now.
func draining(job string, now time.Time) endpoints.Decision {
	return endpoints.Decision{Why: endpoints.WhyDraining, Entry: endpoints.Entry{File: endpoints.FileName("fast", job),
		Endpoint: endpoints.Endpoint{Schema: 2, Tier: "fast", JobID: job, State: endpoints.StateDraining, Reason: "preempted",
			LeaseExpires: now.Add(time.Hour)}}}
}

// cutOnto sends the request with only a routed, routes b beside it once a
// has begun, and lets a stream its second token and cut: so the request
// is a's (least in flight has no say) and its continuation may go to b.
func (r *rig) cutOnto(a, b *testHead, send func() (answer, error)) answer {
	r.t.Helper()
	return r.cutThen(a, func() {
		if b != nil {
			r.route(nil, a, b)
		}
	}, send)
}

// cutThen is cutOnto with then run once a has the request, before it cuts
// (a's mode, "cut" unless set otherwise, says how it ends).
func (r *rig) cutThen(a *testHead, then func(), send func() (answer, error)) answer {
	r.t.Helper()
	a.mu.Lock()
	if a.mode == "" {
		a.mode = "cut"
	}
	a.mu.Unlock()
	a.gate = make(chan struct{})
	r.route(nil, a)
	done := make(chan answer, 1)
	go func() {
		got, err := send()
		if err != nil {
			r.t.Error(err)
		}
		done <- got
	}()
	waitFor(r.t, "a's first token", func() bool { return len(a.requests()) == 1 })
	then()
	a.gate <- struct{}{} // t1
	a.gate <- struct{}{} // then a cuts
	return <-done
}

// A stream cut after two tokens is continued on the other head: the client
// sees one answer (the first head's id and model, one role chunk, no
// repeated text, one finish, [DONE]), and the continuation asked for the
// rest explicitly, its token limit lowered by what was sent.
func TestContinuesACutStream(t *testing.T) {
	for _, echo := range []bool{false, true} {
		t.Run(fmt.Sprintf("echo %v", echo), func(t *testing.T) {
			r := newRig(t, nil)
			a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
			a.tokens, b.tokens, b.echo = 5, 5, echo
			got := r.cutOnto(a, b, func() (answer, error) {
				return r.streamAnswer("/v1/chat/completions", `,"max_tokens":5,"stream_options":{"include_usage":true}`, userMsg)
			})
			want := answer{ids: map[string]bool{"c-101": true}, models: map[string]bool{"qwen-a": true}, text: "t0 t1 t2 t3 t4 ",
				roles: 1, finishes: []string{"length"}, usage: map[string]int{"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6},
				done: true, comments: 1}
			if d := cmp.Diff(want, got, cmp.AllowUnexported(answer{})); d != "" {
				t.Errorf("the client's answer (-want +got):\n%s", d)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			cont := b.bodies[len(b.bodies)-1]
			msgs, _ := json.Marshal(cont["messages"])
			if string(msgs) != `[{"content":"count","role":"user"},{"content":"t0 t1 ","role":"assistant"}]` ||
				cont["continue_final_message"] != "content" || cont["add_generation_prompt"] != false || cont["max_tokens"] != float64(3) {
				t.Errorf("continuation sent: %v", cont)
			}
		})
	}
}

// A head whose endpoint starts to drain is left at the next token for
// another head of the model: the drain then waits for nothing of ours (the
// head sees its client leave), and the client sees one answer.
func TestMovesAStreamOffADrainingHead(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.gate = make(chan struct{})
	a.tokens, b.tokens = 4, 4
	r.route(nil, a)
	done := make(chan answer, 1)
	go func() {
		got, err := r.streamAnswer("/v1/chat/completions", "", userMsg)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	// a's first token reached the client (the time to it is observed when
	// the splicer takes it): from here the move comes after a's next
	// token, whenever the update lands (the test waited for a's request
	// alone, and the drain seen before t0 was taken moved the stream at t0,
	// or before its role chunk: 1 run in 10 on a busy machine).
	r.waitFirstToken()
	// a drains (its file says so; b is routed); a's next token comes.
	now := time.Now()
	drainingA := draining("101", now)
	rep := tiers.Report{Time: now, Live: map[string][]endpoints.Server{"fast": {{Addr: b.addr(), File: endpoints.FileName("fast", "102")}}},
		Decisions: []endpoints.Decision{drainingA, {Live: true, Why: endpoints.WhyReady, Entry: endpoints.Entry{File: endpoints.FileName("fast", "102"),
			Endpoint: endpoints.Endpoint{Schema: 2, Tier: "fast", JobID: "102", State: endpoints.StateReady, Models: []string{"qwen-a"},
				LeaseExpires: now.Add(time.Hour)}}}},
		Views: []tiers.TierView{{Tier: "fast", State: tiers.StateRouted, Reason: tiers.ReasonRouted}}}
	r.s.Update(rep)
	select { // t1 from a: after it, the splicer sees a draining
	case a.gate <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("a never asked for its next token: the stream left it before t1")
	}
	select {
	case <-a.left:
	case <-time.After(10 * time.Second):
		t.Fatal("a's request was not left: its drain would wait for it")
	}
	got := <-done
	// The move comes at the first event boundary after the drain is seen:
	// after t0 when the update lands before the splicer asks a for its
	// next event, else after t1. Either way the client has one answer: a's
	// k tokens, then b's 4 numbered on from the prefill b was sent.
	b.mu.Lock()
	var prefill string
	if n := len(b.bodies); n > 0 {
		if msgs, _ := b.bodies[n-1]["messages"].([]any); len(msgs) > 0 {
			last, _ := msgs[len(msgs)-1].(map[string]any)
			prefill, _ = last["content"].(string)
		}
	}
	b.mu.Unlock()
	k := len(strings.Fields(prefill))
	var want strings.Builder
	for i := 0; i < k+4; i++ {
		fmt.Fprintf(&want, "t%d ", i)
	}
	if k < 1 || k > 2 || got.text != want.String() || got.roles != 1 || !got.ids["c-101"] || len(got.ids) != 1 || !got.done || got.comments != 1 {
		t.Errorf("answer %+v (b was sent the prefill %q): want a's t0 (and t1), then b's 4 tokens, as one", got, prefill)
	}
	if !strings.Contains(r.accessLog(), "continued=1 moved=1") {
		t.Errorf("access log:\n%s", r.accessLog())
	}
}

// A cut with no other head of the model waits (within the tier's hold)
// for one, and continues there.
func TestContinuationWaitsForTheModel(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.setMode("cut")
	a.tokens, b.tokens = 4, 4
	r.route(nil, a)
	done := make(chan answer, 1)
	go func() {
		got, _ := r.streamAnswer("/v1/chat/completions", "", userMsg)
		done <- got
	}()
	waitFor(t, "the continuation held", func() bool { return r.held("fast") == 1 })
	r.route(nil, b) // a is gone, b comes
	got := <-done
	if got.text != "t0 t1 t2 t3 t4 t5 " || !got.done || got.errEvent != "" {
		t.Errorf("answer %+v", got)
	}
	if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", "continued", "false")); n != 1 {
		t.Errorf("continued %v, want 1", n)
	}
}

// /completion is continued with the text appended to its prompt and
// n_predict lowered; the token counts of its last event are the whole
// answer's.
func TestContinuesACompletion(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.tokens, b.tokens = 5, 5
	got := r.cutOnto(a, b, func() (answer, error) { return r.streamAnswer("/completion", `,"n_predict":4`, "") })
	if got.text != "t0 t1 t2 t3 " || len(got.finishes) != 1 {
		t.Errorf("answer %+v", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cont := b.bodies[len(b.bodies)-1]; cont["prompt"] != "count t0 t1 " || cont["n_predict"] != float64(2) {
		t.Errorf("continuation sent: %v", cont)
	}
}

// A /completion whose events name their tokens (llama-server's, FACTS.md
// Q14) is continued by those ids after its prompt, not by its text: the
// next head goes on from the very tokens the first had. When an event
// named fewer tokens than it brought (a token held inside a UTF-8
// character), the ids are not all known and the text is sent as before.
func TestContinuesACompletionByItsTokenIDs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pairs      bool
		want       any
		wantText   string
		wantNPred  float64
		wantCounts [2]int // the last event's tokens_predicted, tokens_evaluated
	}{
		{"ids", false, []any{"count ", float64(idBase), float64(idBase + 1)}, "t0 t1 t2 t3 ", 2, [2]int{4, 1}},
		// (the test head's pairs count as one token each against n_predict:
		// only what is sent is checked)
		{"a token held", true, "count t0 t1 t2 t3 ", "", 4, [2]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
			a.tokens, b.tokens, a.ids, b.ids, a.pairs, b.pairs = 9, 9, true, true, tc.pairs, tc.pairs
			var last map[string]any
			got := r.cutOnto(a, b, func() (answer, error) {
				resp, err := http.Post(r.srv.URL+"/completion", "application/json", strings.NewReader(`{"model":"qwen-a","stream":true,"n_predict":`+fmt.Sprint(2*tc.wantNPred)+`,"prompt":"count "}`))
				if err != nil {
					return answer{}, err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				var a answer
				for _, line := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(line, "data: ") {
						var ev map[string]any
						if json.Unmarshal([]byte(line[6:]), &ev) == nil {
							a.text += fmt.Sprint(ev["content"])
							last = ev
						}
					}
				}
				return a, nil
			})
			if tc.wantText != "" && got.text != tc.wantText {
				t.Errorf("answer %q, want %q", got.text, tc.wantText)
			}
			if tc.wantText != "" && (last["tokens_predicted"] != float64(tc.wantCounts[0]) || last["tokens_evaluated"] != float64(tc.wantCounts[1])) {
				t.Errorf("last event %v, want tokens_predicted %d and tokens_evaluated %d", last, tc.wantCounts[0], tc.wantCounts[1])
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			cont := b.bodies[len(b.bodies)-1]
			if diff := cmp.Diff(tc.want, cont["prompt"]); diff != "" || cont["n_predict"] != tc.wantNPred {
				t.Errorf("continuation sent: %v (prompt -want +got:\n%s)", cont, diff)
			}
		})
	}
}

// Only where it is right: a stream asking for structured output, for
// logprobs, or for several choices is not continued; nor one off by config:
// the client's answer ends with an error event saying why.
func TestNotContinuedWhereItWouldNotMeanTheSame(t *testing.T) {
	for _, tc := range []struct{ name, extra, why string }{
		{"grammar", `,"grammar":"root ::= [a-z]+"`, "structured output"},
		{"json schema", `,"response_format":{"type":"json_object"}`, "structured output"},
		{"logprobs", `,"logprobs":true`, "logprobs"},
		{"several choices", `,"n":2`, "more than one choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
			a.tokens = 5
			got := r.cutOnto(a, b, func() (answer, error) { return r.streamAnswer("/v1/chat/completions", tc.extra, userMsg) })
			if got.text != "t0 t1 " || got.done || !strings.Contains(got.errEvent, tc.why) {
				t.Errorf("answer %+v: want the 2 tokens, then an error event naming %q", got, tc.why)
			}
			if len(b.requests()) != 0 {
				t.Errorf("b got %d requests, want none", len(b.requests()))
			}
			if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", "refused", "false")); n != 1 {
				t.Errorf("refused %v, want 1", n)
			}
		})
	}
}

// A stream cut inside a tool call is not continued (never resume inside
// one): the client gets an error event saying so.
func TestNotContinuedInsideAToolCall(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.tokens, a.toolCall = 5, true
	got := r.cutOnto(a, b, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", `,"tools":[{"type":"function","function":{"name":"get_weather"}}]`, userMsg)
	})
	if got.done || !strings.Contains(got.errEvent, "tool call") || len(b.requests()) != 0 {
		t.Errorf("answer %+v, b got %d requests: want an error event naming the tool call, nothing sent to b", got, len(b.requests()))
	}
}

// Regression: held continuations waited for each other's end. Two streams
// cut on a, held, then b comes: both continue on b at once, not the second
// after the first finished (the arrival-order chain of held requests must
// count a continuation as sent once it is written).
func TestHeldContinuationsGoTogether(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.setMode("cut")
	a.tokens, b.tokens = 5, 5
	a.gate = make(chan struct{})
	b.gate = make(chan struct{}) // b's streams wait after their first token
	r.route(nil, a)
	done := make(chan answer, 2)
	for range 2 {
		go func() {
			got, _ := r.streamAnswer("/v1/chat/completions", "", userMsg)
			done <- got
		}()
	}
	waitFor(t, "both streams at a", func() bool { return len(a.requests()) == 2 })
	close(a.gate) // both get t1 from a, then a cuts them
	waitFor(t, "both continuations held", func() bool { return r.held("fast") == 2 })
	r.route(nil, b)
	waitFor(t, "both continuations at b", func() bool { return len(b.requests()) == 2 })
	close(b.gate)
	for range 2 {
		if got := <-done; got.text != "t0 t1 t2 t3 t4 t5 t6 " || !got.done {
			t.Errorf("answer %+v", got)
		}
	}
}

// Regression (real llama.cpp, a random model): a head's own in-stream
// error event ends its answer: it is passed on and not continued (the
// front door went on generating past it on another head).
func TestAHeadsErrorEventIsNotACut(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.setMode("fail")
	a.tokens = 5
	r.route(nil, a)
	got, err := r.streamAnswer("/v1/chat/completions", "", userMsg)
	r.route(nil, a, b)
	if err != nil || got.text != "t0 t1 " || !strings.Contains(got.errEvent, "peg-native") || got.comments != 0 || len(b.requests()) != 0 {
		t.Errorf("answer %+v (%v): want the head's 2 tokens and its error, nothing continued", got, err)
	}
}
