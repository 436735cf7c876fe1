package front

import (
	"bytes"
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

	"slurm-llm/endpoints/front/stream"
)

// histCount is how many observations tier/model's series of h holds.
func histCount(t *testing.T, h *prometheus.HistogramVec, tier, model string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(tier, model).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestStreamedAnswerIsCounted: the front door times a stream's tokens
// (first, then between), counts its tokens from the usage chunk it asks
// the head for, and its finish; the client that did not ask for usage
// does not get that chunk (issue 29, item 1).
func TestStreamedAnswerIsCounted(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.tokens = 5
	r.route(nil, h)
	got, err := r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"three words here"}]`)
	if err != nil || !got.done {
		t.Fatalf("answer %+v, %v", got, err)
	}
	if got.usage != nil {
		t.Errorf("the client got a usage chunk it did not ask for: %v", got.usage)
	}
	m := r.s.metrics
	counts := map[string]float64{
		"ttft":       float64(histCount(t, m.ttft, "fast", "qwen-a")),
		"itl":        float64(histCount(t, m.itl, "fast", "qwen-a")),
		"prompt":     testutil.ToFloat64(m.tokens.WithLabelValues("fast", "qwen-a", "prompt")),
		"completion": testutil.ToFloat64(m.tokens.WithLabelValues("fast", "qwen-a", "completion")),
		"stop":       testutil.ToFloat64(m.answers.WithLabelValues("fast", "qwen-a", "stop")),
	}
	want := map[string]float64{"ttft": 1, "itl": 4, "prompt": 3, "completion": 5, "stop": 1}
	if d := cmp.Diff(want, counts); d != "" {
		t.Errorf("metrics (-want +got):\n%s", d)
	}
	asked, err := r.streamAnswer("/v1/chat/completions", `,"stream_options":{"include_usage":true}`, `[{"role":"user","content":"hi"}]`)
	if err != nil || asked.usage["completion_tokens"] != 5 {
		t.Errorf("a client that asked: usage %v (%v), want its chunk", asked.usage, err)
	}
}

// TestWholeAnswerIsCounted: a whole answer's usage and finish, read from
// its body on the way.
func TestWholeAnswerIsCounted(t *testing.T) {
	r := newRig(t, nil)
	head := quickHead(t)
	r.route(nil, &testHead{tier: "fast", job: "1", models: []string{"tiny"}, srv: head})
	code, _, body := r.postRaw("/v1/chat/completions", benchChat)
	if code != http.StatusOK || !strings.Contains(body, `"usage"`) {
		t.Fatalf("%d %s", code, body)
	}
	m := r.s.metrics
	got := []float64{testutil.ToFloat64(m.tokens.WithLabelValues("fast", "tiny", "prompt")),
		testutil.ToFloat64(m.tokens.WithLabelValues("fast", "tiny", "completion")),
		testutil.ToFloat64(m.answers.WithLabelValues("fast", "tiny", "stop"))}
	if d := cmp.Diff([]float64{3, 1, 1}, got); d != "" {
		t.Errorf("prompt, completion, stop (-want +got):\n%s", d)
	}
}

// TestContinuedStreamIsCountedOnce: a stream continued on another head is
// one answer: its tokens once (the continuation's usage as the client's
// request's), one finish.
func TestContinuedStreamIsCountedOnce(t *testing.T) {
	r := newRig(t, nil)
	a, b := newTestHead(t, "fast", "1", "qwen-a"), newTestHead(t, "fast", "2", "qwen-a")
	a.tokens, b.tokens = 6, 4
	got := r.cutOnto(a, b, func() (answer, error) {
		return r.streamAnswer("/v1/chat/completions", "", `[{"role":"user","content":"hi"}]`)
	})
	if !got.done {
		t.Fatalf("answer %+v", got)
	}
	m := r.s.metrics
	counts := []float64{testutil.ToFloat64(m.tokens.WithLabelValues("fast", "qwen-a", "completion")),
		testutil.ToFloat64(m.answers.WithLabelValues("fast", "qwen-a", "stop")),
		float64(histCount(t, m.ttft, "fast", "qwen-a"))}
	// 2 tokens from a, then b's 4 (its usage: 4, plus the 2 before).
	if d := cmp.Diff([]float64{6, 1, 1}, counts); d != "" {
		t.Errorf("completion tokens, stops, first tokens (-want +got):\n%s", d)
	}
}

// TestCompletionStreamIsCounted: /completion's last event holds the tokens
// and why it stopped.
func TestCompletionStreamIsCounted(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.tokens = 4
	r.route(nil, h)
	if _, err := r.streamAnswer("/completion", `,"n_predict":4`, ""); err != nil {
		t.Fatal(err)
	}
	m := r.s.metrics
	got := []float64{testutil.ToFloat64(m.tokens.WithLabelValues("fast", "qwen-a", "completion")),
		testutil.ToFloat64(m.answers.WithLabelValues("fast", "qwen-a", "stop")) + testutil.ToFloat64(m.answers.WithLabelValues("fast", "qwen-a", "length"))}
	if d := cmp.Diff([]float64{4, 1}, got); d != "" {
		t.Errorf("completion tokens, answers (-want +got):\n%s", d)
	}
}

// TestBufferedEventsGoTogether: events the head sent in one burst reach
// the client in one read (one write to the client), not one each.
func TestBufferedEventsGoTogether(t *testing.T) {
	var burst bytes.Buffer
	for i := range 8 {
		fmt.Fprintf(&burst, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	s := New(testConfig(), Options{})
	c := &call{tier: "fast", model: "m", kind: stream.Chat, ctx: t.Context()}
	sp := s.newSplicer(c, io.NopCloser(&burst))
	buf := make([]byte, 64<<10)
	n, err := sp.Read(buf)
	if err != nil || strings.Count(string(buf[:n]), "data: ") != 8 {
		t.Errorf("first read: %d bytes, %v, want the 8 events:\n%s", n, err, buf[:n])
	}
}

// BenchmarkSplicerEvent is what one streamed event costs at the front door
// on its way through (scan, token timing and counting; issue 29 wants the
// token metrics under 2 µs an event).
func BenchmarkSplicerEvent(b *testing.B) {
	ev := []byte("data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\" token\"}}],\"created\":1790000000,\"id\":\"chatcmpl-abcdefghijklmnopqrstuvwxyz012345\",\"model\":\"qwen2.5-7b-instruct-q4_k_m\",\"system_fingerprint\":\"b6000-abcdef\",\"object\":\"chat.completion.chunk\"}\n\n")
	s := New(testConfig(), Options{})
	c := &call{tier: "fast", model: "m", kind: stream.Chat, ctx: b.Context(), dispatched: time.Now()}
	sp := s.newSplicer(c, io.NopCloser(&repeater{ev: ev, n: b.N}))
	sp.refuse = "the benchmark's stream has no end to continue to"
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for {
		if _, err := sp.Read(buf); err != nil {
			break
		}
	}
}

// repeater reads as ev n times over, without holding them all.
type repeater struct {
	ev  []byte
	n   int
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.ev[r.off:])
		p, total, r.off = p[c:], total+c, r.off+c
		if r.off == len(r.ev) {
			r.off, r.n = 0, r.n-1
		}
	}
	if total == 0 {
		return 0, io.EOF
	}
	return total, nil
}
