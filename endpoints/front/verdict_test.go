package front

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/upstreams"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	down := func(reason string, back *time.Time) upstreams.TierView {
		return upstreams.TierView{Tier: "fast", State: upstreams.StateDown, Reason: reason, ExpectedBack: back}
	}
	for _, tc := range []struct {
		name    string
		view    upstreams.TierView
		downFor time.Duration
		hold    time.Duration
		want    bool
	}{
		{"no hold asked", down(upstreams.ReasonStarting, nil), 0, 0, false},
		{"routed, heads failing", upstreams.TierView{State: upstreams.StateRouted, Reason: upstreams.ReasonRouted}, 0, time.Second, true},
		{"back before the deadline", down(upstreams.ReasonPreempted, at(20*time.Second)), time.Minute, 30 * time.Second, true},
		{"back at the deadline", down(upstreams.ReasonQueued, at(30*time.Second)), time.Minute, 30 * time.Second, true},
		{"back after the deadline", down(upstreams.ReasonPreempted, at(time.Hour)), 0, 30 * time.Second, false},
		{"loading, no estimate", down(upstreams.ReasonStarting, nil), time.Hour, 30 * time.Second, true},
		{"re-planning", down(upstreams.ReasonReplanning, nil), time.Hour, 30 * time.Second, true},
		{"overdue", upstreams.TierView{State: upstreams.StateDown, Reason: upstreams.ReasonPreempted, Overdue: true}, time.Hour, 30 * time.Second, true},
		{"preempted, no estimate yet, early", down(upstreams.ReasonPreempted, nil), 2 * time.Second, 30 * time.Second, true},
		{"preempted, no estimate, late", down(upstreams.ReasonPreempted, nil), 20 * time.Second, 30 * time.Second, false},
		{"requeued, no estimate yet, early", down(upstreams.ReasonRequeued, nil), time.Second, 30 * time.Second, true},
		{"queued, no estimate, late", down(upstreams.ReasonQueued, nil), time.Minute, 30 * time.Second, false},
		{"disabled", down(upstreams.ReasonDisabled, nil), 0, 30 * time.Second, false},
		{"disabled in config", down("disabled in the keeper's config", nil), 0, 30 * time.Second, false},
		{"held by an admin", down(upstreams.ReasonHeld, nil), 0, 30 * time.Second, false},
		{"held otherwise", down("held: JobHeldUser", nil), 0, 30 * time.Second, false},
		{"not queued", down(upstreams.ReasonNotQueued, nil), 0, 30 * time.Second, false},
		{"file refused", down(upstreams.ReasonRefused, nil), 0, 30 * time.Second, false},
		{"scheduler silent, early", down(upstreams.ReasonUnknown, nil), time.Second, 30 * time.Second, true},
		{"scheduler silent, late", down(upstreams.ReasonUnknown, nil), time.Minute, 30 * time.Second, false},
		{"nothing known, early (a re-plan between files, no scheduler)", down(upstreams.ReasonNoEndpoint, nil), time.Second, 30 * time.Second, true},
		{"nothing known, late", down(upstreams.ReasonNoEndpoint, nil), time.Minute, 30 * time.Second, false},
		{"job failed", down("job FAILED", nil), 0, 30 * time.Second, false},
		{"disabled beats an estimate", down(upstreams.ReasonDisabled, at(time.Second)), 0, 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(HoldInput{View: tc.view, ReasonFor: tc.downFor, Now: now, Deadline: now.Add(tc.hold), HoldUnknown: 15 * time.Second})
			if d := cmp.Diff(tc.want, v.Hold); d != "" || v.Why == "" {
				t.Errorf("hold (-want +got):\n%s (why %q)", d, v.Why)
			}
		})
	}
}

// BenchmarkHoldAnswers is issue 19's figure for the two ends of a hold:
// a request whose tier is known to be out for an hour gets its 503 at once
// (goal: within 50 ms), and one held for a tier that does not come back
// in time gets it at the end of its hold (here 200 ms), not later.
func BenchmarkHoldAnswers(b *testing.B) {
	r := newRig(b, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: 2 * time.Minute, MaxHeld: 8, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	})
	back := time.Now().Add(time.Hour)
	out := []upstreams.TierView{{Tier: "reasoning", State: upstreams.StateDown, Reason: upstreams.ReasonPreempted, ExpectedBack: &back, RetryAfter: 3600}}
	loading := []upstreams.TierView{{Tier: "reasoning", State: upstreams.StateDown, Reason: upstreams.ReasonStarting}}
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
