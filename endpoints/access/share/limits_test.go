package share

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		v    LimitView
		want Decision
	}{
		{name: "no limits", v: LimitView{InFlight: 1000}, want: Decision{OK: true}},
		{name: "under every limit", v: LimitView{Limits: Limits{InFlight: 4, RequestsPerMinute: 60, TokensPerMinute: 1000}, InFlight: 3, Requests: 1, Tokens: 1},
			want: Decision{OK: true}},
		{name: "in flight at the limit", v: LimitView{Limits: Limits{InFlight: 4}, InFlight: 4},
			want: Decision{Limit: LimitInFlight, RetryAfter: InFlightRetry}},
		{name: "in flight first", v: LimitView{Limits: Limits{InFlight: 1, RequestsPerMinute: 6}, InFlight: 1},
			want: Decision{Limit: LimitInFlight, RetryAfter: InFlightRetry}},
		{name: "requests used up: one refills in 60/rpm s", v: LimitView{Limits: Limits{RequestsPerMinute: 6}, Requests: 0},
			want: Decision{Limit: LimitRequests, RetryAfter: 10 * time.Second}},
		{name: "requests half refilled", v: LimitView{Limits: Limits{RequestsPerMinute: 6}, Requests: 0.5},
			want: Decision{Limit: LimitRequests, RetryAfter: 5 * time.Second}},
		{name: "many requests per minute: at least a second", v: LimitView{Limits: Limits{RequestsPerMinute: 6000}, Requests: 0.9},
			want: Decision{Limit: LimitRequests, RetryAfter: time.Second}},
		{name: "tokens in debt: back above zero", v: LimitView{Limits: Limits{TokensPerMinute: 600}, Tokens: -99, Requests: 5},
			want: Decision{Limit: LimitTokens, RetryAfter: 10 * time.Second}},
		{name: "tokens before requests", v: LimitView{Limits: Limits{TokensPerMinute: 600, RequestsPerMinute: 6}, Tokens: 0, Requests: 0},
			want: Decision{Limit: LimitTokens, RetryAfter: time.Second}},
		{name: "a token left is enough", v: LimitView{Limits: Limits{TokensPerMinute: 600}, Tokens: 0.5},
			want: Decision{OK: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.v)
			if d := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Decision{}, "Why")); d != "" {
				t.Errorf("Decide (-want +got):\n%s", d)
			}
			if !got.OK && got.Why == "" {
				t.Error("a refusal without a why")
			}
		})
	}
}

// clock is a settable clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLimiter(t *testing.T) {
	type step struct {
		advance time.Duration
		admit   string // user admitted on tier "big" ("" for a Done step)
		done    string
		tokens  int64
		want    Decision
	}
	tests := []struct {
		name  string
		def   Limits
		tiers map[string]Limits
		steps []step
	}{
		{name: "in flight: a third waits for one to end",
			tiers: map[string]Limits{"big": {InFlight: 2}},
			steps: []step{
				{admit: "a", want: Decision{OK: true}},
				{admit: "a", want: Decision{OK: true}},
				{admit: "a", want: Decision{Limit: LimitInFlight, RetryAfter: InFlightRetry}},
				{admit: "b", want: Decision{OK: true}}, // per user
				{done: "a"},
				{admit: "a", want: Decision{OK: true}},
			}},
		{name: "requests per minute refill evenly",
			def: Limits{RequestsPerMinute: 2},
			steps: []step{
				{admit: "a", want: Decision{OK: true}}, {done: "a"},
				{admit: "a", want: Decision{OK: true}}, {done: "a"},
				{admit: "a", want: Decision{Limit: LimitRequests, RetryAfter: 30 * time.Second}},
				{advance: 20 * time.Second, admit: "a", want: Decision{Limit: LimitRequests, RetryAfter: 10 * time.Second}},
				{advance: 10 * time.Second, admit: "a", want: Decision{OK: true}},
			}},
		{name: "tokens are charged at the end; a large answer is a debt",
			def: Limits{TokensPerMinute: 600},
			steps: []step{
				{admit: "a", want: Decision{OK: true}},
				{done: "a", tokens: 1500}, // 600 - 1500 = -900
				{admit: "a", want: Decision{Limit: LimitTokens, RetryAfter: 91 * time.Second}},
				{admit: "b", want: Decision{OK: true}},
				{advance: 91 * time.Second, admit: "a", want: Decision{OK: true}},
			}},
		{name: "a tier's own limits replace the default",
			def:   Limits{InFlight: 1},
			tiers: map[string]Limits{"big": {}},
			steps: []step{
				{admit: "a", want: Decision{OK: true}},
				{admit: "a", want: Decision{OK: true}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			l := NewLimiter(tt.def, tt.tiers, c.Now)
			for i, s := range tt.steps {
				c.Add(s.advance)
				if s.done != "" {
					l.Done("big", s.done, s.tokens)
					continue
				}
				got := l.Admit("big", s.admit)
				if d := cmp.Diff(s.want, got, cmpopts.IgnoreFields(Decision{}, "Why")); d != "" {
					t.Errorf("step %d: Admit(%s) (-want +got):\n%s", i, s.admit, d)
				}
			}
		})
	}
}

// TestLimiterForgetsIdleUsers: users with nothing in flight and full
// buckets are dropped at the next sweep, so the map is as large as the
// users active in the last minute, not every user ever seen.
func TestLimiterForgetsIdleUsers(t *testing.T) {
	c := &clock{t: t0}
	l := NewLimiter(Limits{RequestsPerMinute: 60}, nil, c.Now)
	for _, u := range []string{"a", "b", "c"} {
		l.Admit("big", u)
		l.Done("big", u, 0)
	}
	l.Admit("big", "busy")
	c.Add(2 * time.Minute)
	l.Admit("big", "d")
	l.mu.Lock()
	var got []string
	for k := range l.users {
		got = append(got, k.user)
	}
	l.mu.Unlock()
	if d := cmp.Diff([]string{"busy", "d"}, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); d != "" {
		t.Errorf("users kept (-want +got):\n%s", d)
	}
}

func TestSetLimitsRemakesBuckets(t *testing.T) {
	c := &clock{t: t0}
	l := NewLimiter(Limits{RequestsPerMinute: 1}, nil, c.Now)
	l.Admit("big", "a")
	if d := l.Admit("big", "a"); d.OK {
		t.Fatal("second request admitted under requests_per_minute 1")
	}
	l.SetLimits(Limits{RequestsPerMinute: 10}, nil)
	if d := l.Admit("big", "a"); !d.OK {
		t.Errorf("after raising the limit: %+v", d)
	}
	if got := l.LimitsOf("big"); got != (Limits{RequestsPerMinute: 10}) {
		t.Errorf("LimitsOf = %+v", got)
	}
}

func TestTracker(t *testing.T) {
	c := &clock{t: t0}
	tr := NewTracker(time.Minute, c.Now)
	tr.Begin("big", "a")
	tr.Begin("big", "a")
	tr.Begin("big", "b")
	tr.End("big", "a", 30*time.Second)
	if d := cmp.Diff(map[string]Load{"a": {Serving: 1, Recent: 30}, "b": {Serving: 1}}, tr.Loads("big")); d != "" {
		t.Errorf("loads (-want +got):\n%s", d)
	}
	c.Add(time.Minute) // one half-life
	tr.End("big", "b", 0)
	if d := cmp.Diff(map[string]Load{"a": {Serving: 1, Recent: 15}}, tr.Loads("big")); d != "" {
		t.Errorf("after a half-life, b done with nothing served (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]Load{}, tr.Loads("small")); d != "" {
		t.Errorf("another tier (-want +got):\n%s", d)
	}
	c.Add(20 * time.Minute)
	tr.End("big", "a", 0)
	if d := cmp.Diff(map[string]Load{}, tr.Loads("big")); d != "" {
		t.Errorf("idle and forgotten (-want +got):\n%s", d)
	}
}

func TestParseSshare(t *testing.T) {
	out := []byte("root||1.000000\n chem||\n  chem|alice|0.750000\n  chem|bob|0.000000\n phys|alice|0.25\n phys|carol|\n")
	got, err := ParseSshare(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Assoc]float64{{"chem", "alice"}: 0.75, {"chem", "bob"}: 0, {"phys", "alice"}: 0.25}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseSshare (-want +got):\n%s", d)
	}
	for _, bad := range []string{"chem|alice\n", "chem|alice|1.5\n", "chem|alice|x\n", "chem|alice|NaN\n"} {
		if _, err := ParseSshare([]byte(bad)); err == nil {
			t.Errorf("ParseSshare(%q): no error", bad)
		}
	}
}

func TestWeightOf(t *testing.T) {
	f := map[Assoc]float64{{"chem", "alice"}: 0.75, {"chem", "bob"}: 0, {"phys", "alice"}: 0.25}
	tests := []struct {
		name, user, account string
		factors             map[Assoc]float64
		want                float64
	}{
		{name: "no reading: equal", user: "alice", want: 1},
		{name: "the association", factors: f, user: "alice", account: "phys", want: 0.25},
		{name: "account unknown: the user's highest", factors: f, user: "alice", want: 0.75},
		{name: "a factor of 0 still weighs MinWeight", factors: f, user: "bob", account: "chem", want: MinWeight},
		{name: "not listed: the mean", factors: f, user: "dave", want: (0.75 + 0 + 0.25) / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WeightOf(tt.factors, tt.user, tt.account); got != tt.want {
				t.Errorf("WeightOf = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWeightsRefreshInTheBackground(t *testing.T) {
	c := &clock{t: t0}
	var mu sync.Mutex
	runs := 0
	out, fail := "chem|alice|0.5\nchem|bob|0.25\n", false
	run := func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		mu.Lock()
		defer mu.Unlock()
		runs++
		if d := cmp.Diff([]string{"sshare", "-a", "-n", "-P", "-o", "Account,User,FairShare"}, argv); d != "" {
			t.Errorf("argv (-want +got):\n%s", d)
		}
		if fail {
			return nil, []byte("sshare: error: Problem talking to the database"), errors.New("exit status 1")
		}
		return []byte(out), nil, nil
	}
	w := NewWeights(WeightsOptions{Run: run, TTL: time.Minute, Now: c.Now})
	if got := w.Weight("bob", "chem"); got != 1 {
		t.Errorf("before any reading: %v, want 1", got)
	}
	waitFor(t, func() bool { return w.Weight("bob", "chem") == 0.25 })
	mu.Lock()
	fail = true
	mu.Unlock()
	c.Add(2 * time.Minute)
	if err := w.Refresh(context.Background()); err == nil {
		t.Error("Refresh: no error from a failing sshare")
	}
	if got := w.Weight("bob", "chem"); got != 0.25 {
		t.Errorf("after a failed reading: %v, want the last (0.25)", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
