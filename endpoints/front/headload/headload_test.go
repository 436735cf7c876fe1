package headload

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// realMetrics is llama-server's /metrics as it writes it (to_metrics in
// tools/server/server-task.cpp: each value a double through an ostream),
// trimmed.
const realMetrics = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1290
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 412.371
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1.4e+01
`

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		slots      bool
		want       Load
		err        bool
	}{
		{name: "metrics", body: realMetrics, want: Load{Processing: 2, Deferred: 14}},
		{name: "metrics without deferred", body: "llamacpp:requests_processing 2\n", err: true},
		{name: "metrics with a bad count", body: "llamacpp:requests_processing -1\nllamacpp:requests_deferred 0\n", err: true},
		{name: "slots", slots: true, body: `[{"id":0,"is_processing":true},{"id":1,"is_processing":false}]`,
			want: Load{Processing: 1, Deferred: -1}},
		{name: "slots not a list", slots: true, body: `{"error":{}}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parse := parseMetrics
			if tc.slots {
				parse = parseSlots
			}
			got, err := parse(strings.NewReader(tc.body))
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if err == nil {
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			}
		})
	}
}
