package tiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tomlconf"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// testEndpoint is a ready endpoint of tier/job on host:port, lease 1 min after t0.
func testEndpoint(tier, job, host string, port int) endpoints.Endpoint {
	return endpoints.Endpoint{
		Schema: endpoints.SchemaVersion, Tier: tier, JobID: job, Host: host, Port: port,
		State: endpoints.StateReady, Models: []string{"m"}, Node: "node1", PID: 1,
		StartedAt: t0, Heartbeat: t0, LeaseExpires: t0.Add(time.Minute),
	}
}

// withTerm is e as an elastic tier's head of term n, in state.
func withTerm(e endpoints.Endpoint, n int, state endpoints.State) endpoints.Endpoint {
	e.Term, e.State = n, state
	return e
}

// inFuture is e with its heartbeat and lease moved d later.
func inFuture(e endpoints.Endpoint, d time.Duration) endpoints.Endpoint {
	e.Heartbeat, e.LeaseExpires = e.Heartbeat.Add(d), e.LeaseExpires.Add(d)
	return e
}

// testConfig is a config on temp dirs with tiers fast and reasoning (backup fast).
func testConfig(t testing.TB) Config {
	t.Helper()
	root := t.TempDir()
	cfg, err := parseOwn("test.toml", []byte(`
endpoint_dir = "`+filepath.Join(root, "endpoints")+`"
lock_file = "`+filepath.Join(root, "lock")+`"
sweep_interval = "50ms"
coalesce = "10ms"
allow_any_owner = true
allow_any_network = true
[tiers.fast]
[tiers.reasoning]
backup = "fast"
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.EndpointDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type fakeResolver map[string][]string

func (f fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// fakeJobs is a scheduler that answers jobs (or err) whatever it is asked.
type fakeJobs struct {
	jobs map[string]Job
	err  error
}

func (f fakeJobs) Jobs(context.Context, []string) (map[string]Job, error) {
	return f.jobs, f.err
}

// me is the uid that owns the files the tests write.
var me = uint32(os.Getuid())

// jobOf is a job of tier in state, owned by the test's user and named as
// the tier's jobs are by default.
func jobOf(tier, state string) Job { return Job{State: state, UID: me, Name: "llm-" + tier} }

func TestPass(t *testing.T) {
	type tierView struct {
		Tier, ServedBy string
		Servers        []string
	}
	tests := []struct {
		name      string
		networks  []string
		files     []endpoints.Endpoint
		jobs      fakeJobs
		want      []tierView
		wantWhy   []string
		wantUnver bool
	}{
		{name: "nothing published", want: []tierView{{"fast", "", nil}, {"reasoning", "", nil}}},
		{name: "fast ready serves reasoning as backup", files: []endpoints.Endpoint{testEndpoint("fast", "1", "10.0.0.1", 8080)},
			jobs:    fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING")}},
			want:    []tierView{{"fast", "fast", []string{"10.0.0.1:8080"}}, {"reasoning", "fast", []string{"10.0.0.1:8080"}}},
			wantWhy: []string{"ready"}},
		{name: "host name resolved, unresolvable dropped",
			files:   []endpoints.Endpoint{testEndpoint("fast", "1", "node1", 8080), testEndpoint("reasoning", "2", "ghost", 8081)},
			jobs:    fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING"), "2": jobOf("reasoning", "RUNNING")}},
			want:    []tierView{{"fast", "fast", []string{"10.1.1.1:8080", "[fd00::1]:8080"}}, {"reasoning", "fast", []string{"10.1.1.1:8080", "[fd00::1]:8080"}}},
			wantWhy: []string{"ready", "host does not resolve"}},
		{name: "address outside allowed networks dropped", networks: []string{"10.1.0.0/16"},
			files:   []endpoints.Endpoint{testEndpoint("fast", "1", "node1", 8080), testEndpoint("reasoning", "2", "127.0.0.1", 8081)},
			jobs:    fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING"), "2": jobOf("reasoning", "RUNNING")}},
			want:    []tierView{{"fast", "fast", []string{"10.1.1.1:8080"}}, {"reasoning", "fast", []string{"10.1.1.1:8080"}}},
			wantWhy: []string{"ready", "address not in allowed_networks"}},
		{name: "job not running dropped", files: []endpoints.Endpoint{testEndpoint("fast", "1", "10.0.0.1", 8080)},
			jobs: fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "COMPLETING")}},
			want: []tierView{{"fast", "", nil}, {"reasoning", "", nil}}, wantWhy: []string{"job COMPLETING"}},
		// A file cannot borrow another user's live job, nor a job that
		// is not its tier's (squeue gives both owner and name).
		{name: "job of another owner not routed", files: []endpoints.Endpoint{testEndpoint("fast", "1", "10.0.0.1", 8080)},
			jobs:    fakeJobs{jobs: map[string]Job{"1": {State: "RUNNING", UID: me + 1, Name: "llm-fast"}}},
			want:    []tierView{{"fast", "", nil}, {"reasoning", "", nil}},
			wantWhy: []string{fmt.Sprintf("job owned by uid %d, not by the file's owner (uid %d)", me+1, me)}},
		{name: "job of another name not routed", files: []endpoints.Endpoint{testEndpoint("fast", "1", "10.0.0.1", 8080)},
			jobs: fakeJobs{jobs: map[string]Job{"1": jobOf("reasoning", "RUNNING")}},
			want: []tierView{{"fast", "", nil}, {"reasoning", "", nil}}, wantWhy: []string{`job named "llm-reasoning", not "llm-fast"`}},
		{name: "kept replica and extra replica both routed",
			files: []endpoints.Endpoint{testEndpoint("fast", "1", "10.0.0.1", 8080), testEndpoint("fast", "2", "10.0.0.2", 8080)},
			jobs: fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING"),
				"2": {State: "RUNNING", UID: me, Name: "llm-fast-extra"}}},
			want: []tierView{{"fast", "fast", []string{"10.0.0.1:8080", "10.0.0.2:8080"}},
				{"reasoning", "fast", []string{"10.0.0.1:8080", "10.0.0.2:8080"}}},
			wantWhy: []string{"ready", "ready"}},
		// Only entries that passed every check fence others (issue 23): a
		// forged file with a huge term, of another user's job named like
		// the tier or of no job at all, supersedes nothing.
		{name: "forged term of another user's job fences nothing",
			files: []endpoints.Endpoint{withTerm(testEndpoint("reasoning", "2", "10.0.0.1", 8080), 3, endpoints.StateReady),
				withTerm(testEndpoint("reasoning", "9", "10.6.6.6", 8080), 999, endpoints.StateStarting)},
			jobs: fakeJobs{jobs: map[string]Job{"2": jobOf("reasoning", "RUNNING"),
				"9": {State: "RUNNING", UID: me + 1, Name: "llm-reasoning"}}},
			want:    []tierView{{"fast", "", nil}, {"reasoning", "reasoning", []string{"10.0.0.1:8080"}}},
			wantWhy: []string{"ready", "starting"}},
		{name: "forged term of no job fences nothing",
			files: []endpoints.Endpoint{withTerm(testEndpoint("reasoning", "2", "10.0.0.1", 8080), 3, endpoints.StateReady),
				withTerm(testEndpoint("reasoning", "9", "10.6.6.6", 8080), 999, endpoints.StateStarting)},
			jobs:    fakeJobs{jobs: map[string]Job{"2": jobOf("reasoning", "RUNNING")}},
			want:    []tierView{{"fast", "", nil}, {"reasoning", "reasoning", []string{"10.0.0.1:8080"}}},
			wantWhy: []string{"ready", "starting"}},
		{name: "a new leader's term still fences the old one",
			files: []endpoints.Endpoint{withTerm(testEndpoint("reasoning", "2", "10.0.0.1", 8080), 3, endpoints.StateReady),
				withTerm(testEndpoint("reasoning", "3", "10.0.0.2", 8080), 4, endpoints.StateStarting)},
			jobs:    fakeJobs{jobs: map[string]Job{"2": jobOf("reasoning", "RUNNING"), "3": jobOf("reasoning", "RUNNING")}},
			want:    []tierView{{"fast", "", nil}, {"reasoning", "", nil}},
			wantWhy: []string{endpoints.WhyOldTerm, "starting"}},
		// A heartbeat beyond the clock skew would keep a lease for ever.
		{name: "heartbeat in the future not routed",
			files: []endpoints.Endpoint{inFuture(testEndpoint("fast", "1", "10.0.0.1", 8080), time.Hour)},
			jobs:  fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING")}},
			want:  []tierView{{"fast", "", nil}, {"reasoning", "", nil}}, wantWhy: []string{endpoints.WhyFuture}},
		{name: "heartbeat within the skew routed",
			files:   []endpoints.Endpoint{inFuture(testEndpoint("fast", "1", "10.0.0.1", 8080), 20*time.Second)},
			jobs:    fakeJobs{jobs: map[string]Job{"1": jobOf("fast", "RUNNING")}},
			want:    []tierView{{"fast", "fast", []string{"10.0.0.1:8080"}}, {"reasoning", "fast", []string{"10.0.0.1:8080"}}},
			wantWhy: []string{"ready"}},
		{name: "scheduler error keeps entry unverified", files: []endpoints.Endpoint{testEndpoint("reasoning", "1", "10.0.0.1", 8080)},
			jobs: fakeJobs{err: errors.New("slurmctld down")},
			want: []tierView{{"fast", "", nil}, {"reasoning", "reasoning", []string{"10.0.0.1:8080"}}}, wantWhy: []string{"ready"}, wantUnver: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			for _, n := range tt.networks {
				cfg.AllowedPrefixes = append(cfg.AllowedPrefixes, netip.MustParsePrefix(n))
			}
			for _, e := range tt.files {
				if err := endpoints.Write(cfg.EndpointDir, e); err != nil {
					t.Fatal(err)
				}
			}
			u := New(cfg, Options{Scheduler: tt.jobs, Now: func() time.Time { return t0 },
				Resolver: fakeResolver{"node1": {"fd00::1", "10.1.1.1", "10.1.1.1"}}})
			rep, err := u.Pass(context.Background())
			if err != nil {
				t.Fatalf("pass: %v", err)
			}
			var got []tierView
			for _, tr := range rep.Tiers {
				got = append(got, tierView{tr.Tier, tr.ServedBy, tr.Servers})
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("tiers (-want +got):\n%s", d)
			}
			var whys []string
			unverified := false
			for _, d := range rep.Decisions {
				whys = append(whys, d.Why)
				unverified = unverified || d.Unverified
			}
			if d := cmp.Diff(tt.wantWhy, whys); d != "" || unverified != tt.wantUnver {
				t.Errorf("whys (-want +got):\n%s unverified %v", d, unverified)
			}
		})
	}
}

// An entry of a tier the config does not name is read but not routed.
func TestPassUnconfiguredTier(t *testing.T) {
	cfg := testConfig(t)
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("other", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	u := New(cfg, Options{Now: func() time.Time { return t0 }})
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Decisions) != 1 || rep.Decisions[0].Live || rep.Decisions[0].Why != "tier not configured" {
		t.Errorf("decisions = %+v", rep.Decisions)
	}
}

// Regression: a bad file was logged on every sweep (every 5 s) forever.
func TestPassLogsRejectionOnce(t *testing.T) {
	cfg := testConfig(t)
	if err := os.WriteFile(filepath.Join(cfg.EndpointDir, "fast-1.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	u := New(cfg, Options{Log: log, Now: func() time.Time { return t0 }})
	for i := 0; i < 3; i++ {
		if _, err := u.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "endpoint file rejected"); n != 1 {
		t.Errorf("rejection logged %d times over 3 passes, want 1:\n%s", n, logs.String())
	}
}

// Regression: fences lived only in the watcher's memory, so the timer's
// sync pass routed an older run's rewritten file again and the two
// processes flipped nginx back and forth.
func TestFencesSharedBetweenProcesses(t *testing.T) {
	cfg := testConfig(t)
	newer := testEndpoint("fast", "7", "10.0.0.2", 8080)
	newer.RestartCount = 1
	if err := endpoints.Write(cfg.EndpointDir, newer); err != nil {
		t.Fatal(err)
	}
	first := New(cfg, Options{Now: func() time.Time { return t0 }})
	if _, err := first.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	stale := testEndpoint("fast", "7", "10.0.0.1", 8080) // restart 0 rewrites the file
	if err := endpoints.Write(cfg.EndpointDir, stale); err != nil {
		t.Fatal(err)
	}
	second := New(cfg, Options{Now: func() time.Time { return t0 }})
	rep, err := second.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Decisions) != 1 || rep.Decisions[0].Why != endpoints.WhySuperseded {
		t.Errorf("stale run's file in a new process: %+v, want superseded", rep.Decisions)
	}
}

// switchResolver answers from addrs, or fails with err when it is set.
type switchResolver struct {
	addrs map[string][]string
	err   error
}

func (s *switchResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if s.err != nil {
		return nil, s.err
	}
	if a, ok := s.addrs[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// A resolver that times out keeps a host's last addresses: a DNS hiccup must
// not empty every tier; a name that no longer exists is dropped.
func TestPassResolverHiccup(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantServers []string
		wantWhy     string
	}{
		{name: "timeout keeps last addresses", err: &net.DNSError{Err: "i/o timeout", Name: "node1", IsTimeout: true, IsTemporary: true},
			wantServers: []string{"10.1.1.1:8080"}, wantWhy: "ready"},
		{name: "server failure keeps last addresses", err: &net.DNSError{Err: "server misbehaving", Name: "node1", IsTemporary: true},
			wantServers: []string{"10.1.1.1:8080"}, wantWhy: "ready"},
		{name: "name gone is dropped", err: &net.DNSError{Err: "no such host", Name: "node1", IsNotFound: true},
			wantWhy: "host does not resolve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "node1", 8080)); err != nil {
				t.Fatal(err)
			}
			res := &switchResolver{addrs: map[string][]string{"node1": {"10.1.1.1"}}}
			u := New(cfg, Options{Now: func() time.Time { return t0 }, Resolver: res})
			if _, err := u.Pass(context.Background()); err != nil {
				t.Fatal(err)
			}
			res.err = tt.err
			rep, err := u.Pass(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.wantServers, rep.Tiers[0].Servers); d != "" {
				t.Errorf("fast servers (-want +got):\n%s", d)
			}
			if got := rep.Decisions[0].Why; got != tt.wantWhy {
				t.Errorf("why = %q, want %q", got, tt.wantWhy)
			}
		})
	}
}

// TestPassCapsFilesRead: a directory flooded with files costs a bounded
// pass (max_files); the configured tiers' files are read first, so junk
// names that sort first cannot push them out; the rest are counted.
func TestPassCapsFilesRead(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFiles = 3
	for i := 0; i < 5; i++ {
		if err := os.WriteFile(filepath.Join(cfg.EndpointDir, fmt.Sprintf("aaa-%d.json", i)), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := endpoints.Write(cfg.EndpointDir, testEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m := &Metrics{}
	u := New(cfg, Options{Now: func() time.Time { return t0 }, Metrics: m,
		Log: hclog.New(&hclog.LoggerOptions{Output: &logs})})
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.SkippedFiles != 3 || len(rep.Scan.Entries)+len(rep.Scan.Rejected) != 3 {
		t.Errorf("read %d entries and %d rejected, skipped %d; want 3 read, 3 skipped", len(rep.Scan.Entries), len(rep.Scan.Rejected), rep.SkippedFiles)
	}
	if len(rep.Tiers) == 0 || len(rep.Tiers[0].Servers) != 1 {
		t.Errorf("the tier's file was pushed out by junk: %+v", rep.Tiers)
	}
	if !strings.Contains(logs.String(), "more files than max_files") {
		t.Errorf("the cap was not logged:\n%s", logs.String())
	}
	var text bytes.Buffer
	if err := m.WritePrometheus(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "llm_upstreams_skipped_files_total 3") {
		t.Errorf("the skipped files were not counted:\n%s", text.String())
	}
}

// parseOwn reads the watcher's keys of an upstreams.toml as the file's
// loader (endpoints/config) does, for a file with no [front].
func parseOwn(path string, b []byte) (Config, error) {
	cfg := DefaultConfig()
	cfg.Path = path
	err := tomlconf.Decode(path, b, func(d *tomlconf.Decoder) { d.Root(cfg.Fields(d)) },
		func(d *tomlconf.Decoder) { cfg.Check(d, user.Lookup) })
	return cfg, err
}
