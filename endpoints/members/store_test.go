package members

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/fsutil"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// member is a valid member file for job, at t0.
func member(job string) Member {
	return Member{Schema: SchemaVersion, Tier: "reasoning", JobID: job, RunID: "00000000000000" + job[len(job)-2:],
		Node: "node" + job[len(job)-1:], Addr: "10.78.0." + job[len(job)-1:], RPCPort: 50052, State: StateReady,
		Heartbeat: t0, LeaseExpires: t0.Add(10 * time.Second)}
}

func TestStoreRoundTripAndIgnored(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir, "reasoning", nil)
	for _, j := range []string{"101", "102"} {
		if err := s.WriteMember(member(j)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(s.Dir(), name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("member-103.json", "{not json")
	other := member("104")
	other.Tier = "fast"
	b, _ := jsonOf(other)
	write("member-104.json", b)
	b, _ = jsonOf(member("105"))
	write("member-999.json", b) // name and content disagree
	if err := os.Symlink(filepath.Join(s.Dir(), "member-101.json"), filepath.Join(s.Dir(), "member-106.json")); err != nil {
		t.Fatal(err)
	}
	c, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Member{member("101"), member("102")}, c.Members); d != "" {
		t.Errorf("members (-want +got):\n%s", d)
	}
	var ignored []string
	for _, ig := range c.Ignored {
		ignored = append(ignored, ig.File)
	}
	if d := cmp.Diff([]string{"member-103.json", "member-104.json", "member-106.json", "member-999.json"}, ignored); d != "" {
		t.Errorf("ignored files (-want +got):\n%s", d)
	}
}

// Exactly one of many members racing for a term gets it.
func TestTakeTermIsExclusive(t *testing.T) {
	s := NewStore(t.TempDir(), "reasoning", nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := s.TakeTerm(Term{Schema: SchemaVersion, N: 1, JobID: "100", RunID: "0123456789abcdef", Created: t0})
			if err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			} else if !errors.Is(err, ErrTermTaken) {
				t.Errorf("TakeTerm: %v", err)
			}
		}(i)
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d members took term 1, want exactly 1", won)
	}
	c, err := s.Read()
	if err != nil || c.Term.N != 1 || c.Term.JobID != "100" {
		t.Errorf("Read = term %+v, %v; want term 1 of job 100", c.Term, err)
	}
	if err := s.TakeTerm(Term{Schema: SchemaVersion, N: 3, JobID: "101", RunID: "0123456789abcdef", Created: t0}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Read(); c.Term.N != 3 {
		t.Errorf("highest term = %d, want 3", c.Term.N)
	}
}

// A member file is removed only by the run that wrote it.
func TestRemoveMemberOnlyOwnRun(t *testing.T) {
	s := NewStore(t.TempDir(), "reasoning", nil)
	m := member("101")
	if err := s.WriteMember(m); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMember("101", "ffffffffffffffff"); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Read(); len(c.Members) != 1 {
		t.Fatal("another run removed the member file")
	}
	if err := s.RemoveMember("101", m.RunID); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Read(); len(c.Members) != 0 {
		t.Error("the member file is left after its own run removed it")
	}
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// Issue 23: a FIFO named like a member file blocked every Store.Read for
// ever (every member's supervisor and every keeper scrape, each leaking a
// goroutine): it is opened without blocking, and ignored.
func TestAFIFOIsIgnoredNotWaitedFor(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir, "reasoning", nil)
	if err := s.WriteMember(member("101")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(s.Dir(), "member-102.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan Contents, 1)
	go func() {
		c, _ := s.Read()
		done <- c
	}()
	select {
	case c := <-done:
		if len(c.Members) != 1 || len(c.Ignored) != 1 || !strings.Contains(c.Ignored[0].Reason, "not a regular file") {
			t.Errorf("read %+v: want member 101, the FIFO ignored", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Store.Read blocked on a FIFO")
	}
}

// Issue 23: a heartbeat in 2099 kept a member's lease alive for ever.
func TestAFutureHeartbeatIsIgnored(t *testing.T) {
	s := NewStore(t.TempDir(), "reasoning", nil).WithClock(func() time.Time { return t0 }, 3*time.Second)
	far := member("101")
	far.Heartbeat, far.LeaseExpires = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2099, 1, 1, 0, 0, 10, 0, time.UTC)
	near := member("102")
	near.Heartbeat, near.LeaseExpires = t0.Add(2*time.Second), t0.Add(12*time.Second) // within the skew
	for _, m := range []Member{far, near} {
		if err := s.WriteMember(m); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Members) != 1 || c.Members[0].JobID != "102" || len(c.Ignored) != 1 || !strings.Contains(c.Ignored[0].Reason, "in the future") {
		t.Errorf("read %+v: want 102 only, 101 ignored for its heartbeat", c)
	}
}

// Issue 23: members/ and members/<tier>/ were made with MkdirAll, which
// takes a directory another user made first (who could then delete or
// swap term files): one anyone can write, another account's, or a symlink
// is refused with how to fix it; the reader does not follow a symlink.
func TestAPreCreatedMembersDirIsRefused(t *testing.T) {
	t.Run("writable by others", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "members", "reasoning"), 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, "members", "reasoning"), 0o777)
		err := NewStore(dir, "reasoning", nil).WriteMember(member("101"))
		if !errors.Is(err, fsutil.ErrUnsafeDir) || !strings.Contains(err.Error(), "chmod o-w") {
			t.Errorf("write into a world-writable members dir: %v", err)
		}
	})
	t.Run("another account's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory away")
		}
		dir := t.TempDir()
		d := filepath.Join(dir, "members")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, 12345, 12345)
		if err := NewStore(dir, "reasoning", nil).TakeTerm(Term{Schema: SchemaVersion, N: 1, JobID: "101", RunID: "0123456789abcdef"}); !errors.Is(err, fsutil.ErrUnsafeDir) {
			t.Errorf("take a term in another user's members dir: %v", err)
		}
	})
	t.Run("a symlink", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		if err := os.Symlink(elsewhere, filepath.Join(dir, "members")); err != nil {
			t.Fatal(err)
		}
		s := NewStore(dir, "reasoning", nil)
		if err := s.WriteMember(member("101")); !errors.Is(err, fsutil.ErrUnsafeDir) {
			t.Errorf("write through a symlinked members dir: %v", err)
		}
		os.MkdirAll(filepath.Join(elsewhere, "reasoning"), 0o755)
		if _, err := s.Read(); err == nil {
			t.Errorf("read through a symlinked members dir: no error")
		}
	})
}

// FuzzParseMember feeds arbitrary bytes to the member file parser, as
// FuzzParse does for endpoint files: it must not panic, and what it accepts
// must be valid, with a node and address safe to print and dial, and
// survive a write/parse round trip unchanged.
func FuzzParseMember(f *testing.F) {
	good, _ := json.Marshal(member("1001"))
	f.Add(good)
	f.Add([]byte(`{"schema":1}`))
	f.Add(append(append([]byte{}, good...), []byte(`{}`)...))
	f.Add([]byte(strings.Replace(string(good), `"10.78.0.1"`, `"fd00::1%eth0"`, 1)))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMember(b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseMember accepted an invalid member: %v", err)
		}
		if strings.ContainsAny(m.Node+m.Addr, " ;{}\"'\n\r\t\\$#") {
			t.Fatalf("ParseMember accepted an unsafe node or address %q %q", m.Node, m.Addr)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal accepted member: %v", err)
		}
		m2, err := ParseMember(again)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if d := cmp.Diff(m, m2); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

// FuzzParseTerm does the same for term files.
func FuzzParseTerm(f *testing.F) {
	good, _ := json.Marshal(Term{Schema: SchemaVersion, N: 3, JobID: "1001", RunID: "0123456789abcdef", Node: "node1", Created: t0})
	f.Add(good)
	f.Add([]byte(`{"schema":1,"term":-1}`))
	f.Add([]byte(`{"schema":1,"term":99999999999999999999}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := ParseTerm(b)
		if err != nil {
			return
		}
		if err := tm.Validate(); err != nil || tm.N < 1 {
			t.Fatalf("ParseTerm accepted an invalid term (%d): %v", tm.N, err)
		}
		again, err := json.Marshal(tm)
		if err != nil {
			t.Fatalf("marshal accepted term: %v", err)
		}
		tm2, err := ParseTerm(again)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if d := cmp.Diff(tm, tm2); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

// Issue 30: Read gave the highest *valid* term, so one unreadable term
// file above it (a newer schema in a rolling upgrade, a damaged file,
// another owner's) sent every candidate to take a term whose file already
// exists, at every tick, for ever. Top is the highest number among the
// names, valid or not; a name that is no term number does not count.
func TestReadReportsTheHighestTermNumberEvenUnreadable(t *testing.T) {
	term := func(n int) Term {
		return Term{Schema: SchemaVersion, N: n, JobID: "101", RunID: "0123456789abcdef", Created: t0}
	}
	bad := func(n int) string {
		t := term(n)
		t.Schema = SchemaVersion + 1
		b, _ := jsonOf(t)
		return b
	}
	tests := []struct {
		name     string
		files    map[string]string // besides the valid terms
		valid    []int
		wantTerm int
		wantTop  int
	}{
		{name: "all valid", valid: []int{1, 2, 10}, wantTerm: 10, wantTop: 10},
		{name: "the highest in a newer schema", valid: []int{1}, files: map[string]string{"term-2.json": bad(2)}, wantTerm: 1, wantTop: 2},
		{name: "the highest damaged", valid: []int{1, 9}, files: map[string]string{"term-10.json": "{"}, wantTerm: 9, wantTop: 10},
		{name: "the highest names another term", valid: []int{3}, files: map[string]string{"term-4.json": func() string { b, _ := jsonOf(term(5)); return b }()},
			wantTerm: 3, wantTop: 4},
		{name: "no term number: not counted", valid: []int{2}, files: map[string]string{"term-x.json": "{}", "term-0.json": "{}",
			"term-99999999999999999999.json": "{}", "term-1099511627777.json": "{}"}, wantTerm: 2, wantTop: 2},
		{name: "only an unreadable one", files: map[string]string{"term-7.json": "{"}, wantTerm: 0, wantTop: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(t.TempDir(), "reasoning", nil)
			for _, n := range tt.valid {
				if err := s.TakeTerm(term(n)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.EnsureDirs(); err != nil {
				t.Fatal(err)
			}
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(s.Dir(), name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := s.Read()
			if err != nil {
				t.Fatal(err)
			}
			if c.Term.N != tt.wantTerm || c.Top != tt.wantTop {
				t.Errorf("Read: term %d, top %d; want term %d, top %d (ignored %v)", c.Term.N, c.Top, tt.wantTerm, tt.wantTop, c.Ignored)
			}
		})
	}
}
