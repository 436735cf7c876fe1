package front

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCodeCompletionPathsAreLlamaServersOwnEvents: llama-server answers
// /completions and /infill with /completion's handler: its own events,
// "stop": true at the end, no [DONE] (FACTS.md Q10). Issue 37, defect 1:
// the front door read /completions as an OpenAI text stream and /infill as
// no stream, so a streamed answer that ended normally got a spurious 502
// "the answer was cut" event, was logged outcome=cut, its head was marked
// failing and no token was counted.
func TestCodeCompletionPathsAreLlamaServersOwnEvents(t *testing.T) {
	for _, path := range []string{"/completion", "/completions", "/infill"} {
		t.Run(path, func(t *testing.T) {
			r := newRig(t, nil)
			h := newTestHead(t, "fast", "1", "qwen-a")
			h.tokens = 5
			r.route(nil, h)
			body := `{"model":"qwen-a","stream":true,"prompt":"t0 t1","input_prefix":"def f(","input_suffix":"):"}`
			code, answer := r.streamRawBody(path, body)
			if code != http.StatusOK || strings.Contains(answer, `"code":502`) || !strings.Contains(answer, `"stop":true`) {
				t.Fatalf("%s: %d %s", path, code, answer)
			}
			waitFor(t, "the access line", func() bool { return strings.Contains(r.accessLog(), "outcome=") })
			if line := r.accessLog(); !strings.Contains(line, "outcome=answered") {
				t.Errorf("access log: want outcome=answered:\n%s", line)
			}
			if got := testutil.ToFloat64(r.s.metrics.tokens.WithLabelValues("fast", "qwen-a", "completion")); got != 5 {
				t.Errorf("completion tokens counted %v, want 5", got)
			}
			if r.s.tab.Load().heads["fast"][0].failing(r.s.now()) {
				t.Errorf("the head is marked failing after an answer that ended as llama-server ends it")
			}
		})
	}
}
