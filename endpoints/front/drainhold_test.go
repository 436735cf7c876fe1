package front

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// Regression (issue 27): a stream cut by its drain's deadline (16 s after
// the notice, the shipped budget for a single tier) found "no hold: no
// estimate (preempted by a higher-priority job)": hold_unknown (15 s) was
// counted from the drain's start, while the draining head still served
// the stream. It now counts from when the tier stopped serving: no head
// routed, none draining.
func TestHoldUnknownCountsFromWhenTheTierStoppedServing(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock := &testClock{t: t0}
	cfg := DefaultConfig() // hold_unknown 15 s
	cfg.Tiers["fast"] = DefaultTier
	s := New(cfg, Options{Now: clock.now})
	file := func(st endpoints.State, reason string, live bool) endpoints.Decision {
		return endpoints.Decision{Live: live, Why: string(st), Entry: endpoints.Entry{File: "fast-7.json",
			Endpoint: endpoints.Endpoint{Schema: 2, Tier: "fast", JobID: "7", State: st, Reason: reason,
				Models: []string{"qwen-a"}, LeaseExpires: t0.Add(time.Hour)}}}
	}
	preempted := tiers.TierView{Tier: "fast", State: tiers.StateDown, Reason: tiers.ReasonPreempted, RetryAfter: 30}
	pass := func(at time.Duration, view tiers.TierView, ds ...endpoints.Decision) {
		clock.set(t0.Add(at))
		rep := tiers.Report{Time: t0.Add(at), Views: []tiers.TierView{view}, Decisions: ds, Live: map[string][]endpoints.Server{}}
		for _, d := range ds {
			if d.Live {
				rep.Live["fast"] = append(rep.Live["fast"], endpoints.Server{Addr: "127.0.0.1:1", File: d.File})
			}
		}
		s.Update(rep)
	}
	type step struct {
		at   time.Duration
		hold bool
	}
	var got []step
	ask := func(at time.Duration) {
		clock.set(t0.Add(at))
		got = append(got, step{at, s.verdict("fast", t0.Add(at).Add(30*time.Second)).Hold})
	}
	pass(0, tiers.TierView{Tier: "fast", State: tiers.StateRouted, Reason: tiers.ReasonRouted},
		file(endpoints.StateReady, "", true))
	pass(time.Second, preempted, file(endpoints.StateDraining, "preempted", false)) // the notice: the drain begins
	ask(10 * time.Second)
	pass(17*time.Second, preempted, file(endpoints.StateDraining, "preempted", false)) // in-flight deadline: the stream is cut
	ask(17 * time.Second)
	pass(22*time.Second, preempted) // the head stopped, its file removed: nothing serves from here
	ask(22 * time.Second)
	ask(36 * time.Second)
	ask(38 * time.Second) // 16 s with nothing serving and no estimate
	want := []step{{10 * time.Second, true}, {17 * time.Second, true}, {22 * time.Second, true},
		{36 * time.Second, true}, {38 * time.Second, false}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(step{})); d != "" {
		t.Errorf("held (-want +got):\n%s", d)
	}
}
