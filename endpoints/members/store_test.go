package members

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
