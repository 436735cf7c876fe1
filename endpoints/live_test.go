package endpoints

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// entry builds an Entry for a tier, job, restart count and state with a
// lease ending at lease.
func entry(tier, job string, restart int, state State, lease time.Time) Entry {
	e := validEndpoint()
	e.Tier, e.JobID, e.RestartCount, e.State = tier, job, restart, state
	e.Heartbeat, e.LeaseExpires = lease.Add(-time.Minute), lease
	return Entry{File: FileName(tier, job), Endpoint: e}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	later := now.Add(30 * time.Second)
	running := JobStates{Asked: true, States: map[string]string{"1": "RUNNING", "2": "RUNNING", "3": "PENDING"}}
	type result struct {
		File, Why        string
		Live, Unverified bool
	}
	tests := []struct {
		name    string
		entries []Entry
		jobs    JobStates
		fences  map[string]int
		want    []result
	}{
		{name: "ready and running", entries: []Entry{entry("fast", "1", 0, StateReady, later)}, jobs: running,
			want: []result{{"fast-1.json", WhyReady, true, false}}},
		{name: "scheduler not asked keeps ready", entries: []Entry{entry("fast", "9", 0, StateReady, later)},
			want: []result{{"fast-9.json", WhyReady, true, false}}},
		{name: "lease expired", entries: []Entry{entry("fast", "1", 0, StateReady, now.Add(-time.Nanosecond))}, jobs: running,
			want: []result{{"fast-1.json", WhyExpired, false, false}}},
		{name: "lease ends exactly now still holds", entries: []Entry{entry("fast", "1", 0, StateReady, now)}, jobs: running,
			want: []result{{"fast-1.json", WhyReady, true, false}}},
		{name: "starting not routed", entries: []Entry{entry("fast", "1", 0, StateStarting, later)}, jobs: running,
			want: []result{{"fast-1.json", WhyStarting, false, false}}},
		{name: "draining dropped at once", entries: []Entry{entry("fast", "1", 0, StateDraining, later)}, jobs: running,
			want: []result{{"fast-1.json", WhyDraining, false, false}}},
		{name: "job pending", entries: []Entry{entry("fast", "3", 0, StateReady, later)}, jobs: running,
			want: []result{{"fast-3.json", "job PENDING", false, false}}},
		{name: "job absent is gone", entries: []Entry{entry("fast", "4", 0, StateReady, later)}, jobs: running,
			want: []result{{"fast-4.json", WhyGone, false, false}}},
		{name: "scheduler error drops nothing", entries: []Entry{entry("fast", "4", 0, StateReady, later), entry("fast", "5", 0, StateDraining, later)},
			jobs: JobStates{Asked: true, Err: errors.New("squeue: timeout")},
			want: []result{{"fast-4.json", WhyReady, true, true}, {"fast-5.json", WhyDraining, false, false}}},
		{name: "highest restart count wins", entries: []Entry{entry("fast", "1", 0, StateReady, later), entry("fast", "1", 2, StateReady, later), entry("reasoning", "1", 0, StateReady, later)},
			jobs: running,
			want: []result{{"fast-1.json", WhySuperseded, false, false}, {"fast-1.json", WhyReady, true, false}, {"reasoning-1.json", WhyReady, true, false}}},
		{name: "an elastic tier routes only its newest leader", entries: []Entry{
			termEntry(entry("reasoning", "1", 0, StateReady, later), 4), termEntry(entry("reasoning", "2", 0, StateStarting, later), 5),
			termEntry(entry("reasoning", "3", 0, StateReady, now.Add(-time.Second)), 9)},
			jobs: JobStates{Asked: true, States: map[string]string{"1": "RUNNING", "2": "RUNNING", "3": "RUNNING"}},
			want: []result{{"reasoning-1.json", WhyOldTerm, false, false}, {"reasoning-2.json", WhyStarting, false, false},
				{"reasoning-3.json", WhyExpired, false, false}}},
		{name: "fence from an earlier pass", entries: []Entry{entry("fast", "1", 1, StateReady, later)}, jobs: running,
			fences: map[string]int{FenceKey("fast", "1"): 2},
			want:   []result{{"fast-1.json", WhySuperseded, false, false}}},
		{name: "expired latest does not revive older", entries: []Entry{entry("fast", "2", 0, StateReady, later), entry("fast", "2", 1, StateReady, now.Add(-time.Second))}, jobs: running,
			want: []result{{"fast-2.json", WhySuperseded, false, false}, {"fast-2.json", WhyExpired, false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []result
			for _, d := range Decide(tt.entries, tt.jobs, tt.fences, now) {
				got = append(got, result{d.File, d.Why, d.Live, d.Unverified})
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
}

func TestCandidates(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	entries := []Entry{
		entry("fast", "20", 0, StateReady, now.Add(time.Minute)),
		entry("reasoning", "20", 0, StateReady, now.Add(time.Minute)),
		entry("fast", "3", 0, StateReady, now.Add(time.Minute)),
		entry("fast", "4", 0, StateDraining, now.Add(time.Minute)),
		entry("fast", "5", 0, StateReady, now.Add(-time.Minute)),
	}
	if d := cmp.Diff([]string{"20", "3"}, Candidates(entries, now)); d != "" {
		t.Errorf("candidates (-want +got):\n%s", d)
	}
}

// fakeChecker records its calls and answers from a fixed map or error.
type fakeChecker struct {
	calls  [][]string
	states map[string]string
	err    error
}

func (f *fakeChecker) JobStates(_ context.Context, ids []string) (map[string]string, error) {
	f.calls = append(f.calls, ids)
	return f.states, f.err
}

func TestAskScheduler(t *testing.T) {
	tests := []struct {
		name      string
		ids       []string
		checker   *fakeChecker
		wantCalls int
		wantAsked bool
		wantErr   bool
	}{
		{name: "no ids, no call", checker: &fakeChecker{}, wantCalls: 0},
		{name: "one call for all ids", ids: []string{"1", "2"}, checker: &fakeChecker{states: map[string]string{"1": "RUNNING"}}, wantCalls: 1, wantAsked: true},
		{name: "error kept", ids: []string{"1"}, checker: &fakeChecker{err: errors.New("down")}, wantCalls: 1, wantAsked: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AskScheduler(context.Background(), tt.checker, tt.ids)
			if len(tt.checker.calls) != tt.wantCalls || got.Asked != tt.wantAsked || (got.Err != nil) != tt.wantErr {
				t.Errorf("calls %d asked %v err %v; want %d %v %v", len(tt.checker.calls), got.Asked, got.Err, tt.wantCalls, tt.wantAsked, tt.wantErr)
			}
		})
	}
	if got := AskScheduler(context.Background(), nil, []string{"1"}); got.Asked {
		t.Errorf("nil checker: asked = true")
	}
}

// termEntry sets an entry's leadership term (an elastic tier's file).
func termEntry(en Entry, term int) Entry {
	en.Endpoint.Term = term
	return en
}

func TestServerOf(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := Decision{Entry: entry("fast", "5", 2, StateReady, now)}
	d.Endpoint.Port = 8081
	got := []string{ServerOf(d, "10.0.0.1").Addr, ServerOf(d, "fd00::1").Addr}
	if diff := cmp.Diff([]string{"10.0.0.1:8081", "[fd00::1]:8081"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
