package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/tiers"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func at0(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func stateEv(s int, tier, state, reason string) tiers.RecordEvent {
	return tiers.RecordEvent{Time: at0(s), Event: tiers.EventState, Tier: tier, State: state, Reason: reason}
}

func TestAvailability(t *testing.T) {
	events := []tiers.RecordEvent{
		{Time: at0(0), Event: tiers.EventStart},
		stateEv(0, "fast", tiers.StateRouted, tiers.ReasonRouted),
		stateEv(100, "fast", tiers.StateDown, tiers.ReasonStopping), // preemption 1 (its drain first): back after 4 s
		stateEv(101, "fast", tiers.StateDown, tiers.ReasonPreempted),
		stateEv(102, "fast", tiers.StateDown, tiers.ReasonStarting),
		stateEv(104, "fast", tiers.StateRouted, tiers.ReasonRouted),
		stateEv(200, "fast", tiers.StateDown, tiers.ReasonPreempted), // preemption 2: back after 6 s
		stateEv(206, "fast", tiers.StateRouted, tiers.ReasonRouted),
		stateEv(300, "fast", tiers.StateDown, tiers.ReasonQueued), // 60 s queued
		stateEv(360, "fast", tiers.StateRouted, tiers.ReasonRouted),
		{Time: at0(400), Event: tiers.EventStop}, // 100 s unobserved
		{Time: at0(500), Event: tiers.EventStart},
		stateEv(900, "fast", tiers.StateBackup, tiers.ReasonPreempted), // still on its backup at the end (1000)
	}
	rep := Availability(events, []string{"fast", "idle"}, at0(0), at0(1000))
	fast := rep.Tiers[0]
	want := TierAvailability{Tier: "fast", Observed: 900 * time.Second, Routed: 730 * time.Second, Backup: 100 * time.Second,
		Down: 70 * time.Second, RoutedPct: 81.11, ServedPct: 92.22, Outages: 4, Preemptions: 3,
		Recovery: DurationStats{Count: 2, Median: 5 * time.Second, P90: 6 * time.Second, Max: 6 * time.Second},
		Longest:  &Outage{Start: at0(900), Duration: 100 * time.Second, Cause: tiers.ReasonPreempted},
		Why: []CauseTime{{Cause: tiers.ReasonPreempted, Outages: 3, Time: 110 * time.Second},
			{Cause: tiers.ReasonQueued, Outages: 1, Time: 60 * time.Second}}}
	if d := cmp.Diff(want, fast); d != "" {
		t.Errorf("fast (-want +got):\n%s", d)
	}
	if idle := rep.Tiers[1]; idle.Tier != "idle" || idle.RoutedPct != -1 || idle.Outages != 0 {
		t.Errorf("a tier never recorded: %+v", idle)
	}
	// A window that starts mid-outage counts the outage's part inside it.
	rep = Availability(events, nil, at0(202), at0(300))
	if f := rep.Tiers[0]; f.Outages != 1 || f.Observed != 98*time.Second || f.Down != 4*time.Second || f.Recovery.Max != 6*time.Second {
		t.Errorf("window from 202: %+v", f)
	}
	var b bytes.Buffer
	if err := WriteAvailability(&b, Availability(events, []string{"fast"}, at0(0), at0(1000)), false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"81.11%", "5s / 6s / 6s", "(still down): preempted by a higher-priority job", "queued: waiting for resources"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}

func TestParseSince(t *testing.T) {
	for in, want := range map[string]time.Time{"7d": t0.Add(-7 * 24 * time.Hour), "36h": t0.Add(-36 * time.Hour),
		"0.5d": t0.Add(-12 * time.Hour), "2026-11-01T00:00:00Z": time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)} {
		if got, err := ParseSince(in, t0); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1d", "7", "d"} {
		if _, err := ParseSince(bad, t0); err == nil {
			t.Errorf("ParseSince(%q): want an error", bad)
		}
	}
}
