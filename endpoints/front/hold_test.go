package front

import (
	"slices"
	"testing"
	"time"

	"slurm-llm/endpoints/tiers"
)

// BenchmarkHoldAnswers is issue 19's figure for the two ends of a hold:
// a request whose tier is known to be out for an hour gets its 503 at once
// (goal: within 50 ms), and one held for a tier that does not come back
// in time gets it at the end of its hold (here 200 ms), not later.
func BenchmarkHoldAnswers(b *testing.B) {
	r := newRig(b, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: 2 * time.Minute, MaxHeld: 8, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	})
	back := time.Now().Add(time.Hour)
	out := []tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonPreempted, ExpectedBack: &back, RetryAfter: 3600}}
	loading := []tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonStarting}}
	var atOnce, late []time.Duration
	for i := 0; i < b.N; i++ {
		r.route(out)
		start := time.Now()
		if code, _, _ := r.do("OR1-Behemoth", "x"); code != 503 {
			b.Fatalf("out for an hour: got %d", code)
		}
		atOnce = append(atOnce, time.Since(start))
		r.route(loading)
		start = time.Now()
		if code, _, _ := r.do("OR1-Behemoth", "x", HoldHeader, "200ms"); code != 503 {
			b.Fatalf("held 200 ms: got %d", code)
		}
		late = append(late, time.Since(start)-200*time.Millisecond)
	}
	slices.Sort(atOnce)
	slices.Sort(late)
	b.ReportMetric(float64(atOnce[len(atOnce)/2])/1e6, "ms-out-for-an-hour-median")
	b.ReportMetric(float64(atOnce[len(atOnce)-1])/1e6, "ms-out-for-an-hour-max")
	b.ReportMetric(float64(late[len(late)/2])/1e6, "ms-past-the-hold-median")
	b.ReportMetric(float64(late[len(late)-1])/1e6, "ms-past-the-hold-max")
}
