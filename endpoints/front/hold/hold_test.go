package hold

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/tiers"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	down := func(reason string, back *time.Time) tiers.TierView {
		return tiers.TierView{Tier: "fast", State: tiers.StateDown, Reason: reason, ExpectedBack: back}
	}
	for _, tc := range []struct {
		name    string
		view    tiers.TierView
		downFor time.Duration
		hold    time.Duration
		want    bool
	}{
		{"no hold asked", down(tiers.ReasonStarting, nil), 0, 0, false},
		{"routed, heads failing", tiers.TierView{State: tiers.StateRouted, Reason: tiers.ReasonRouted}, 0, time.Second, true},
		{"back before the deadline", down(tiers.ReasonPreempted, at(20*time.Second)), time.Minute, 30 * time.Second, true},
		{"back at the deadline", down(tiers.ReasonQueued, at(30*time.Second)), time.Minute, 30 * time.Second, true},
		{"back after the deadline", down(tiers.ReasonPreempted, at(time.Hour)), 0, 30 * time.Second, false},
		{"loading, no estimate", down(tiers.ReasonStarting, nil), time.Hour, 30 * time.Second, true},
		{"re-planning", down(tiers.ReasonReplanning, nil), time.Hour, 30 * time.Second, true},
		{"overdue", tiers.TierView{State: tiers.StateDown, Reason: tiers.ReasonPreempted, Overdue: true}, time.Hour, 30 * time.Second, true},
		{"preempted, no estimate yet, early", down(tiers.ReasonPreempted, nil), 2 * time.Second, 30 * time.Second, true},
		{"preempted, no estimate, late", down(tiers.ReasonPreempted, nil), 20 * time.Second, 30 * time.Second, false},
		{"requeued, no estimate yet, early", down(tiers.ReasonRequeued, nil), time.Second, 30 * time.Second, true},
		{"queued, no estimate, late", down(tiers.ReasonQueued, nil), time.Minute, 30 * time.Second, false},
		{"disabled", down(tiers.ReasonDisabled, nil), 0, 30 * time.Second, false},
		{"disabled in config", down("disabled in the keeper's config", nil), 0, 30 * time.Second, false},
		{"held by an admin", down(tiers.ReasonHeld, nil), 0, 30 * time.Second, false},
		{"held otherwise", down("held: JobHeldUser", nil), 0, 30 * time.Second, false},
		{"not queued", down(tiers.ReasonNotQueued, nil), 0, 30 * time.Second, false},
		{"file refused", down(tiers.ReasonRefused, nil), 0, 30 * time.Second, false},
		{"scheduler silent, early", down(tiers.ReasonUnknown, nil), time.Second, 30 * time.Second, true},
		{"scheduler silent, late", down(tiers.ReasonUnknown, nil), time.Minute, 30 * time.Second, false},
		{"nothing known, early (a re-plan between files, no scheduler)", down(tiers.ReasonNoEndpoint, nil), time.Second, 30 * time.Second, true},
		{"nothing known, late", down(tiers.ReasonNoEndpoint, nil), time.Minute, 30 * time.Second, false},
		{"job failed", down("job FAILED", nil), 0, 30 * time.Second, false},
		{"disabled beats an estimate", down(tiers.ReasonDisabled, at(time.Second)), 0, 30 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(Input{View: tc.view, ReasonFor: tc.downFor, Now: now, Deadline: now.Add(tc.hold), HoldUnknown: 15 * time.Second})
			if d := cmp.Diff(tc.want, v.Hold); d != "" || v.Why == "" {
				t.Errorf("hold (-want +got):\n%s (why %q)", d, v.Why)
			}
		})
	}
}
