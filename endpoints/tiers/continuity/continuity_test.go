package continuity

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/keeper"
)

func TestCheckContinuation(t *testing.T) {
	// The shipped fast tier: hold 30 s, hold_unknown 15 s, the keeper
	// releasing within 2 s, a single tier's drain (16 s in flight, a 9 s
	// ordered stop).
	fast := Facts{Tier: "fast", Front: FrontHold{Hold: 30 * time.Second, Continue: true}, HoldUnknown: 15 * time.Second,
		Release: true, ReleaseWithin: 2 * time.Second, InFlight: 16 * time.Second, Stop: 9 * time.Second}
	edit := func(f Facts, change func(*Facts)) Facts { change(&f); return f }
	tests := []struct {
		name string
		in   Facts
		want []string // a word each problem must hold, in order
	}{
		{name: "the shipped fast tier", in: fast},
		{name: "the shipped fast tier, its start-to-ready measured", in: edit(fast, func(f *Facts) { f.StartToReady = 5 * time.Second })},
		{name: "the front door's start: no drain known", in: edit(fast, func(f *Facts) { f.InFlight, f.Stop = 0, 0 })},
		{name: "the shipped reasoning tier: a 72B reload of 100 s after a distributed drain's 16 s stop fits 2 m",
			in: edit(fast, func(f *Facts) {
				f.Tier, f.Front.Hold, f.InFlight, f.Stop, f.StartToReady = "reasoning", 2*time.Minute, 9*time.Second, 16*time.Second, 100*time.Second
			})},
		{name: "a load longer than the hold leaves", want: []string{"hold = 2m0s: after the cut the tier is back at the earliest 2m8s"},
			in: edit(fast, func(f *Facts) {
				f.Tier, f.Front.Hold, f.Stop, f.StartToReady = "reasoning", 2*time.Minute, 16*time.Second, 110*time.Second
			})},
		{name: "the keeper does not release: Slurm's 121 s hold", want: []string{"Slurm's requeue hold 2m1s: release = false"},
			in: edit(fast, func(f *Facts) {
				f.Release, f.ReleaseWithin, f.NoRelease = false, 0, "release = false for tier fast"
			})},
		{name: "no estimate is never held", want: []string{"hold_unknown = 0s"},
			in: edit(fast, func(f *Facts) { f.HoldUnknown = 0 })},
		{name: "continuation off", want: []string{"continue = false"},
			in: edit(fast, func(f *Facts) { f.Front.Continue = false })},
		{name: "no hold at all", want: []string{"hold = 0s: nothing is held"},
			in: edit(fast, func(f *Facts) { f.Front.Hold = 0 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Check(tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d %q does not say %q", i, got[i], w)
				}
			}
		})
	}
}

func TestKeeperRelease(t *testing.T) {
	kc := &keeper.Config{Path: "/etc/slurm-llm/keeper.toml", ReleaseInterval: time.Second, ReleaseDelay: time.Second,
		Tiers: map[string]keeper.TierConfig{"fast": {Release: true}, "reasoning": {Release: false}}}
	type answer struct {
		Release bool
		Within  time.Duration
		Why     string
	}
	ask := func(kc *keeper.Config, tier string) answer {
		r, w, why := KeeperRelease(kc, tier)
		return answer{r, w, why}
	}
	got := []answer{ask(kc, "fast"), ask(kc, "reasoning"), ask(kc, "other"), ask(nil, "fast"),
		ask(&keeper.Config{Path: "k.toml", Tiers: kc.Tiers}, "fast")}
	want := []answer{{true, 2 * time.Second, ""},
		{false, 0, "release = false for tier reasoning in /etc/slurm-llm/keeper.toml"},
		{false, 0, "the keeper (/etc/slurm-llm/keeper.toml) does not keep tier other"},
		{false, 0, "no keeper config (keeper_config)"},
		{false, 0, "release_interval = 0 in k.toml"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
