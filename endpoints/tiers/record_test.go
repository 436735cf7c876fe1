package tiers

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The record stays under max_size across its two files, keeps the newest
// lines, and reads back in order; a torn line is skipped, not fatal.
func TestRecordRotatesWithinBound(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	r, err := OpenRecord(dir, max)
	if err != nil {
		t.Fatal(err)
	}
	var last RecordEvent
	for i := 0; i < 2000; i++ {
		last = RecordEvent{Time: t0.Add(time.Duration(i) * time.Second), Event: EventState, Tier: "fast", State: StateDown,
			Reason: ReasonPreempted, Job: "7"}
		if err := r.Append(last); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, name := range []string{RecordFile, RecordFile + ".1"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > max {
		t.Errorf("record holds %d bytes, over max_size %d", total, max)
	}
	events, bad, err := ReadRecord(dir)
	if err != nil || bad != 0 {
		t.Fatalf("read: %v, %d bad", err, bad)
	}
	if len(events) < 200 || !events[len(events)-1].Time.Equal(last.Time) {
		t.Fatalf("read %d events, last %+v; want the newest kept", len(events), events[len(events)-1])
	}
	for i := 1; i < len(events); i++ {
		if !events[i].Time.After(events[i-1].Time) {
			t.Fatalf("events out of order at %d", i)
		}
	}
	// A torn last line (a crash mid-write, before the fsync) is skipped.
	f, _ := os.OpenFile(filepath.Join(dir, RecordFile), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-`)
	f.Close()
	if _, bad, err := ReadRecord(dir); err != nil || bad != 1 {
		t.Errorf("torn line: %v, %d bad; want 1", err, bad)
	}
	// Reopened, it appends to the same file.
	r, err = OpenRecord(dir, max)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Append(RecordEvent{Time: last.Time.Add(time.Second), Event: EventStop}); err != nil {
		t.Fatal(err)
	}
}

// Regression: a preemption's outage began with the drain ("stopping") and
// was recorded as such; the preemption counted nowhere.
func TestTransitionCauseIsTheFirstSpecificReason(t *testing.T) {
	m := tierMem{State: StateRouted, Reason: ReasonRouted}
	for i, r := range []string{ReasonStopping, ReasonStarting, ReasonPreempted, ReasonStarting} {
		m, _, _ = transition(m, TierView{Tier: "fast", State: StateDown, Reason: r}, t0.Add(time.Duration(i)*time.Second))
	}
	_, _, end := transition(m, TierView{Tier: "fast", State: StateRouted, Reason: ReasonRouted}, t0.Add(4*time.Second))
	if end == nil || end.Cause != ReasonPreempted || end.Duration != 4*time.Second {
		t.Errorf("outage %+v, want 4s caused by %q", end, ReasonPreempted)
	}
	m, _, _ = transition(tierMem{State: StateRouted}, TierView{Tier: "fast", State: StateDown, Reason: ReasonStopping}, t0)
	if _, _, end := transition(m, TierView{Tier: "fast", State: StateRouted}, t0.Add(time.Second)); end.Cause != ReasonStopping {
		t.Errorf("an outage with only a passing reason: cause %q, want it", end.Cause)
	}
}

func TestTransition(t *testing.T) {
	down := TierView{Tier: "fast", State: StateDown, Reason: ReasonPreempted, Job: "7", Preemptor: &Preemptor{Job: "9"}}
	m, ev, end := transition(tierMem{State: StateRouted, Reason: ReasonRouted}, down, t0)
	want := &RecordEvent{Time: t0, Event: EventState, Tier: "fast", State: StateDown, Reason: ReasonPreempted, Job: "7", Preemptor: "9"}
	if d := cmp.Diff(want, ev); d != "" || end != nil || !m.OutageStart.Equal(t0) || m.OutageCause != ReasonPreempted {
		t.Fatalf("going down: event (-want +got):\n%s\nend %v mem %+v", d, end, m)
	}
	m, ev, end = transition(m, TierView{Tier: "fast", State: StateDown, Reason: ReasonStarting}, t0.Add(5*time.Second))
	if ev == nil || end != nil || m.OutageCause != ReasonPreempted {
		t.Fatalf("a new reason: event %v end %v; the cause stays the first one: %+v", ev, end, m)
	}
	m, ev, _ = transition(m, TierView{Tier: "fast", State: StateDown, Reason: ReasonStarting}, t0.Add(6*time.Second))
	if ev != nil {
		t.Fatalf("same state and reason recorded again: %+v", ev)
	}
	m, ev, end = transition(m, TierView{Tier: "fast", State: StateRouted, Reason: ReasonRouted}, t0.Add(9*time.Second))
	if ev == nil || end == nil || end.Duration != 9*time.Second || end.Cause != ReasonPreempted || !m.OutageStart.IsZero() {
		t.Fatalf("back: event %v end %+v mem %+v", ev, end, m)
	}
}

// Regression (issue 30, item 4): rotation closed the file before renaming
// it; when the rename or the reopen failed, every later Append failed
// ("file already closed") until the process restarted, even once the
// cause was gone: 16 of 20 appends failed while .1 was blocked, and 20 of
// 20 after. Now the file stays open, the line is kept, the failure is
// reported once, and the next append tries again.
func TestRecordRotationThatFailsLosesNothing(t *testing.T) {
	opener := func(fail *bool) func(string) (*os.File, error) {
		return func(path string) (*os.File, error) {
			if *fail {
				return nil, errors.New("open: too many open files")
			}
			return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		}
	}
	tests := []struct {
		name string
		// block makes rotations fail; unblock removes the cause.
		block, unblock func(dir string, fail *bool)
		// aside: the failing rotation leaves the open file renamed to .1.
		aside bool
	}{
		{name: "the rename fails (.1 is a directory that is not empty)",
			block: func(dir string, _ *bool) {
				os.MkdirAll(filepath.Join(dir, RecordFile+".1", "x"), 0o755)
			},
			unblock: func(dir string, _ *bool) { os.RemoveAll(filepath.Join(dir, RecordFile+".1")) }},
		{name: "the new file cannot be opened", aside: true,
			block:   func(_ string, fail *bool) { *fail = true },
			unblock: func(_ string, fail *bool) { *fail = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			fail := false
			const max = 4096 // about 30 lines of 130 bytes
			r, err := openRecord(dir, max, opener(&fail))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ev := func(i int) RecordEvent {
				return RecordEvent{Time: t0.Add(time.Duration(i) * time.Second), Event: EventState, Tier: "fast",
					State: StateDown, Reason: ReasonPreempted}
			}
			tt.block(dir, &fail)
			var errs []error
			for i := 0; i < 40; i++ {
				if err := r.Append(ev(i)); err != nil {
					errs = append(errs, err)
				}
			}
			if len(errs) != 1 || !errors.Is(errs[0], ErrRotate) {
				t.Errorf("while rotations fail: errors %v; want one, ErrRotate", errs)
			}
			events, _, err := readRecordFile(filepath.Join(dir, RecordFile))
			if tt.aside {
				events, _, err = ReadRecord(dir)
			}
			if err != nil || len(events) != 40 {
				t.Fatalf("while rotations fail: %d events read (%v), want all 40", len(events), err)
			}
			tt.unblock(dir, &fail)
			for i := 40; i < 80; i++ {
				if err := r.Append(ev(i)); err != nil {
					t.Fatalf("append %d once the cause is gone: %v", i, err)
				}
			}
			events, _, err = ReadRecord(dir)
			if err != nil || len(events) == 0 || !events[len(events)-1].Time.Equal(ev(79).Time) {
				t.Fatalf("once the cause is gone: %d events read (%v), want the newest kept", len(events), err)
			}
			var total int64
			for _, name := range []string{RecordFile, RecordFile + ".1"} {
				if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
					total += fi.Size()
				}
			}
			if total > max {
				t.Errorf("the record holds %d bytes once rotations work again, over max_size %d", total, max)
			}
		})
	}
}
