package usage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"slurm-llm/endpoints/promtest"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func rec(user, account, tier, model, outcome string, status int, prompt, completion int64) Record {
	return Record{Time: t0, User: user, Account: account, Tier: tier, Model: model, Outcome: outcome, Status: status,
		PromptTokens: prompt, CompletionTokens: completion, Held: 1500 * time.Millisecond, Served: 2 * time.Second}
}

var mixed = []Record{
	rec("alice", "chem", "big", "qwen-72b", "answered", 200, 100, 400),
	rec("alice", "chem", "big", "qwen-72b", "cut", 200, 50, 10),
	rec("alice", "phys", "fast", "qwen-7b", "answered", 200, 10, 20),
	rec("bob", "phys", "fast", "qwen-7b", "answered", 200, 5, 5),
	rec("bob", "phys", "fast", "qwen-7b", "rejected", 429, 0, 0),
	rec("", "", "fast", "qwen-7b", "answered", 200, 1, 1),
}

func openT(t *testing.T, path string, o Options) *Recorder {
	t.Helper()
	r, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func summarize(t *testing.T, path string, by By) Report {
	t.Helper()
	db, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := Summarize(context.Background(), db, by, t0.Add(-time.Hour), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRecordAndSummarize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.db")
	r := openT(t, path, Options{Batch: 4, Now: func() time.Time { return t0 }})
	for _, x := range mixed {
		if !r.Add(x) {
			t.Fatal("Add dropped a record")
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("database mode %s, want 0600", fi.Mode().Perm())
	}
	row := func(r Row, n, errs int64) Row {
		r.Requests, r.Errors = n, errs
		r.HeldSeconds, r.ServedSeconds = 1.5*float64(n), 2*float64(n)
		return r
	}
	tests := []struct {
		by   By
		want []Row
	}{
		{ByUser, []Row{
			row(Row{User: "alice", Account: "chem", PromptTokens: 150, CompletionTokens: 410}, 2, 1),
			row(Row{User: "alice", Account: "phys", PromptTokens: 10, CompletionTokens: 20}, 1, 0),
			row(Row{User: "bob", Account: "phys", PromptTokens: 5, CompletionTokens: 5}, 2, 1),
			row(Row{PromptTokens: 1, CompletionTokens: 1}, 1, 0),
		}},
		{ByAccount, []Row{
			row(Row{Account: "chem", PromptTokens: 150, CompletionTokens: 410}, 2, 1),
			row(Row{Account: "phys", PromptTokens: 15, CompletionTokens: 25}, 3, 1),
			row(Row{PromptTokens: 1, CompletionTokens: 1}, 1, 0),
		}},
		{ByModel, []Row{
			row(Row{Model: "qwen-72b", Tier: "big", PromptTokens: 150, CompletionTokens: 410}, 2, 1),
			row(Row{Model: "qwen-7b", Tier: "fast", PromptTokens: 16, CompletionTokens: 26}, 4, 1),
		}},
		{ByTier, []Row{
			row(Row{Tier: "big", PromptTokens: 150, CompletionTokens: 410}, 2, 1),
			row(Row{Tier: "fast", PromptTokens: 16, CompletionTokens: 26}, 4, 1),
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.by), func(t *testing.T) {
			rep := summarize(t, path, tt.by)
			if d := cmp.Diff(tt.want, rep.Rows); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
			if rep.Total.Tokens() != 602 || rep.Total.Requests != 6 || rep.Dropped != 0 || rep.UncleanStops != 0 {
				t.Errorf("total %+v dropped %d unclean %d", rep.Total, rep.Dropped, rep.UncleanStops)
			}
		})
	}
}

func TestWriteReport(t *testing.T) {
	rep := Report{Since: t0.Add(-24 * time.Hour), Until: t0, By: ByAccount, Rows: []Row{
		{Account: "chem", Requests: 2, Errors: 1, PromptTokens: 150, CompletionTokens: 450, HeldSeconds: 3, ServedSeconds: 4.25},
		{Requests: 1, PromptTokens: 100, CompletionTokens: 100},
	}, Dropped: 3, UncleanStops: 1, LostPerStop: 256}
	var b bytes.Buffer
	if err := WriteReport(&b, rep, false); err != nil {
		t.Fatal(err)
	}
	want := `--------------------------------------------------------------------------------
Usage by account 2026-11-24T12:00:00 - 2026-11-25T12:00:00 (86400 secs)
Tokens reported as counts, times in seconds
--------------------------------------------------------------------------------
   Account  Requests    Errors    Prompt Completion    Tokens   Percent      Held    Served
 --------- --------- --------- --------- ---------- --------- --------- --------- ---------
      chem         2         1       150        450       600    75.00%       3.0       4.2
         -         1         0       100        100       200    25.00%       0.0       0.0

Not in the table: 3 records dropped (queue full or database failing); 1 unclean stops of the recorder, each losing at most 256 records
`
	rep.Total = Row{PromptTokens: 250, CompletionTokens: 550}
	b.Reset()
	WriteReport(&b, rep, false)
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
	b.Reset()
	if err := WriteReport(&b, rep, true); err != nil || !strings.Contains(b.String(), `"completion_tokens": 450`) {
		t.Errorf("JSON: %v %s", err, b.String())
	}
}

func TestRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.db")
	now := t0
	r := openT(t, path, Options{Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	old := rec("alice", "chem", "big", "m", "answered", 200, 1, 1)
	old.Time = t0.Add(-48 * time.Hour)
	r.Add(old)
	r.Add(rec("bob", "phys", "big", "m", "answered", 200, 1, 1))
	r.Close()
	db, _ := OpenReadOnly(path)
	if n := count(t, db); n != 2 {
		t.Fatalf("%d records before retention, want 2", n)
	}
	db.Close()
	r = openT(t, path, Options{Retention: 24 * time.Hour, Now: func() time.Time { return now }})
	r.Close()
	db, _ = OpenReadOnly(path)
	defer db.Close()
	if n := count(t, db); n != 1 {
		t.Errorf("%d records after retention, want 1 (the day-old one gone)", n)
	}
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM requests`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDropsAreCounted: with the writer stuck on a database another
// connection locks, a full queue drops records; every record Add refused
// is counted (in the database's losses and the metric), none silently.
func TestDropsAreCounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.db")
	m := NewMetrics(false)
	r := openT(t, path, Options{Batch: 1, Queue: 2, Metrics: m, Now: func() time.Time { return t0 }})
	lock, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	conn, _ := lock.Conn(context.Background())
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := 0; i < 20; i++ {
		if !r.Add(rec("alice", "chem", "big", "m", "answered", 200, 1, 1)) {
			refused++
		}
	}
	conn.ExecContext(context.Background(), "ROLLBACK")
	conn.Close()
	r.Close()
	if refused < 20-3 {
		t.Errorf("%d refused, want at least 17 (one being written, two queued)", refused)
	}
	rep := summarize(t, path, ByUser)
	if rep.Dropped != int64(refused) || rep.Total.Requests != int64(20-refused) {
		t.Errorf("dropped %d written %d, want %d and %d", rep.Dropped, rep.Total.Requests, refused, 20-refused)
	}
	if got := testutilValue(t, m, "llm_front_usage_dropped_total"); got != float64(refused) {
		t.Errorf("llm_front_usage_dropped_total = %v, want %d", got, refused)
	}
	if !(&Recorder{stop: closedChan(), ch: make(chan Record, 1), o: Options{}}).Add(Record{}) == false {
		t.Error("Add after Close took the record")
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func testutilValue(t *testing.T, c prometheus.Collector, key string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		expfmt.MetricFamilyToText(&b, f)
	}
	s, err := promtest.Samples(b.String())
	if err != nil {
		t.Fatal(err)
	}
	return s[key]
}

func TestMetrics(t *testing.T) {
	for _, userLabel := range []bool{false, true} {
		m := NewMetrics(userLabel)
		for _, x := range mixed {
			m.Observe(x)
		}
		key := func(account, tier, user, kind string) string {
			if userLabel {
				return fmt.Sprintf(`llm_front_usage_tokens_total{account="%s",kind="%s",tier="%s",user="%s"}`, account, kind, tier, user)
			}
			return fmt.Sprintf(`llm_front_usage_tokens_total{account="%s",kind="%s",tier="%s"}`, account, kind, tier)
		}
		if got := testutilValue(t, m, key("chem", "big", "alice", "completion")); got != 410 {
			t.Errorf("user label %v: chem/big completion = %v, want 410", userLabel, got)
		}
		if got := testutilValue(t, m, key("phys", "fast", "bob", "prompt")); userLabel && got != 5 {
			t.Errorf("bob's prompt tokens = %v, want 5", got)
		}
		if got := testutilValue(t, m, key("phys", "fast", "", "prompt")); !userLabel && got != 15 {
			t.Errorf("phys/fast prompt = %v, want 15", got)
		}
	}
}

// TestCrashLosesAtMostTheLastBatch runs a recorder in a child process
// that writes one full batch, queues some more and is killed (SIGKILL);
// the database then holds the full batch, opens again, and counts one
// unclean stop.
func TestCrashLosesAtMostTheLastBatch(t *testing.T) {
	if os.Getenv("USAGE_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	path := filepath.Join(t.TempDir(), "usage.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashLosesAtMostTheLastBatch$")
	cmd.Env = append(os.Environ(), "USAGE_CRASH_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed: %v\n%s", err, out)
	}
	r := openT(t, path, Options{Batch: 8, Now: func() time.Time { return t0 }})
	r.Close()
	rep := summarize(t, path, ByUser)
	if rep.Total.Requests != 8 || rep.UncleanStops != 1 || rep.LostPerStop != 8 {
		t.Errorf("after the crash: %d records, %d unclean stops (≤%d lost each); want 8, 1, 8", rep.Total.Requests, rep.UncleanStops, rep.LostPerStop)
	}
}

// crashChild writes a batch of 8, waits until it is in the database,
// queues 3 more (the flush is an hour away) and kills itself.
func crashChild() {
	path := os.Getenv("USAGE_CRASH_CHILD")
	r, err := Open(path, Options{Batch: 8, Flush: time.Hour})
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	for i := 0; i < 11; i++ {
		if i == 8 {
			db, _ := OpenReadOnly(path)
			deadline := time.Now().Add(10 * time.Second)
			for n := 0; n < 8 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				db.QueryRow(`SELECT COUNT(*) FROM requests`).Scan(&n)
			}
			db.Close()
		}
		r.Add(rec("u"+strconv.Itoa(i), "a", "big", "m", "answered", 200, 1, 1))
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// BenchmarkAdd is what the request path pays to record a request: the
// metrics and a send on the writer's channel (the writer runs beside it).
func BenchmarkAdd(b *testing.B) {
	r, err := Open(filepath.Join(b.TempDir(), "usage.db"), Options{Metrics: NewMetrics(false), Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	x := rec("alice", "chem", "big", "qwen-72b", "answered", 200, 100, 400)
	b.ReportAllocs()
	dropped := 0
	for i := 0; i < b.N; i++ {
		if !r.Add(x) {
			dropped++
		}
	}
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
}
