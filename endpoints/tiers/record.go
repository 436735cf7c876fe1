package tiers

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The availability record: an append-only file of JSON lines, one per
// change of a tier's state or reason (routed, served by its backup, down,
// and why), plus a line when watch starts and stops, in
// <state_dir>/availability.jsonl. Each line is written with O_APPEND and
// fsynced (a few lines a day), so a crash loses nothing written. When the
// file would pass half of record.max_size it is renamed to
// availability.jsonl.1 (replacing the previous one) and a new file begins:
// the two together stay under max_size and hold the most recent history.
// `llm-upstreams report` reads both. A rotation that fails (the rename, or
// opening the new file) loses nothing: appends go on into the file already
// open, the failure is reported once, and the next append tries again.

// RecordFile is the record's current file in the state dir; the one
// rotated before it has ".1" appended.
const RecordFile = "availability.jsonl"

// Record events.
const (
	EventState = "state" // a tier's state or reason changed
	EventStart = "start" // watch started: what follows was observed
	EventStop  = "stop"  // watch stopped: nothing is observed until the next start
)

// RecordEvent is one line of the record.
type RecordEvent struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	// Tier, State and Reason are set for EventState: the tier's new state
	// (StateRouted, StateBackup, StateDown) and why.
	Tier   string `json:"tier,omitempty"`
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Job, Preemptor and ExpectedBack are what the view said then.
	Job          string     `json:"job,omitempty"`
	Preemptor    string     `json:"preemptor,omitempty"`
	ExpectedBack *time.Time `json:"expected_back,omitempty"`
}

// Record appends events to the record of one state dir. It is safe for
// one writer; the zero value is not usable (OpenRecord).
type Record struct {
	mu      sync.Mutex
	dir     string
	maxSize int64
	f       *os.File
	size    int64
	// aside: the open file was renamed to .1 and no new one could be
	// opened yet; appends go on into it (report reads .1 first), and the
	// next rotation only opens the new file.
	aside bool
	// failing: the last rotation failed and was reported; the next failure
	// in a row is not reported again.
	failing bool
	// openFile opens the current file for appending (os.OpenFile; a test
	// makes it fail).
	openFile func(path string) (*os.File, error)
}

// ErrRotate is wrapped by the error Append returns when the line was
// written but the rotation before it failed: the record goes on in the
// file already open, and the next append tries the rotation again. It is
// returned once per run of failures.
var ErrRotate = errors.New("record rotation failed")

// OpenRecord opens (creating) the record in dir for appending.
func OpenRecord(dir string, maxSize int64) (*Record, error) {
	return openRecord(dir, maxSize, func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	})
}

// openRecord is OpenRecord with the function that opens the current file.
func openRecord(dir string, maxSize int64, openFile func(string) (*os.File, error)) (*Record, error) {
	r := &Record{dir: dir, maxSize: maxSize, openFile: openFile}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("open record: %w", err)
	}
	f, size, err := r.open()
	if err != nil {
		return nil, fmt.Errorf("open record: %w", err)
	}
	r.f, r.size = f, size
	return r, nil
}

func (r *Record) path() string { return filepath.Join(r.dir, RecordFile) }

// open opens the current file for appending, and says how large it is.
func (r *Record) open() (*os.File, int64, error) {
	f, err := r.openFile(r.path())
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// Append writes one event as a line and fsyncs it, rotating first when
// the line would take the file past half of maxSize. A rotation that fails
// keeps the line: it goes into the file already open (the record may then
// pass max_size until a rotation works), and Append reports the failure
// once (ErrRotate).
func (r *Record) Append(ev RecordEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	var rotErr error
	if r.size > 0 && r.size+int64(len(b)) > r.maxSize/2 {
		rotErr = r.rotate()
	}
	if _, err := r.f.Write(b); err != nil {
		return errors.Join(fmt.Errorf("record: %w", err), rotErr)
	}
	r.size += int64(len(b))
	if err := r.f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("record: %w", err), rotErr)
	}
	return rotErr
}

// rotate renames the current file to .1 (unless it already is) and opens a
// new one; only then is the old one closed. It returns an error only for a
// failure that begins a run of them (the caller reports it once).
func (r *Record) rotate() error {
	err := r.rename()
	if err == nil {
		var f *os.File
		var size int64
		if f, size, err = r.open(); err == nil {
			old := r.f
			r.f, r.size, r.aside, r.failing = f, size, false, false
			old.Close() // every line in it was synced
			return nil
		}
	}
	if r.failing {
		return nil
	}
	r.failing = true
	return fmt.Errorf("%w: %w (the line is kept in the file open; tried again at the next append)", ErrRotate, err)
}

// rename moves the open file to .1, unless an earlier rotation did.
func (r *Record) rename() error {
	if r.aside {
		return nil
	}
	if err := os.Rename(r.path(), r.path()+".1"); err != nil {
		return err
	}
	r.aside = true
	if d, err := os.Open(r.dir); err == nil { // the rename survives a crash
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Close closes the file.
func (r *Record) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

// ReadRecord reads the record of dir, the rotated file first. A missing
// file is empty; a line that does not parse (a torn or foreign line) is
// skipped and counted in bad.
func ReadRecord(dir string) (events []RecordEvent, bad int, err error) {
	for _, name := range []string{RecordFile + ".1", RecordFile} {
		evs, n, err := readRecordFile(filepath.Join(dir, name))
		if err != nil {
			return nil, 0, err
		}
		events, bad = append(events, evs...), bad+n
	}
	return events, bad, nil
}

func readRecordFile(path string) ([]RecordEvent, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read record: %w", err)
	}
	defer f.Close()
	var events []RecordEvent
	bad := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev RecordEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Time.IsZero() || ev.Event == "" {
			bad++
			continue
		}
		events = append(events, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("read record %s: %w", path, err)
	}
	return events, bad, nil
}

// outageEnd is an outage that a pass saw end.
type outageEnd struct {
	Tier     string
	Cause    string
	Duration time.Duration
}

// passing reasons say what a tier is doing, not why it went down: the
// drain and restart of a preemption show "stopping" and "starting" for a
// moment before its job is seen requeued and its preemptor found. An
// outage's cause is its first reason that is not one of these (else its
// first reason).
var passing = map[string]bool{ReasonStopping: true, ReasonStarting: true, ReasonUnknown: true}

// Passing reports whether reason is a passing one (see passing): an
// outage's cause is the first reason it gave that is not.
func Passing(reason string) bool { return passing[reason] }

// transition folds a tier's view into its memory's record state: the
// event to append when the state or reason changed (nil otherwise), and
// the outage that ended, if the tier is routed again. It is pure.
func transition(m tierMem, v TierView, now time.Time) (tierMem, *RecordEvent, *outageEnd) {
	var ended *outageEnd
	switch {
	case v.State == StateRouted:
		if !m.OutageStart.IsZero() {
			ended = &outageEnd{Tier: v.Tier, Cause: m.OutageCause, Duration: now.Sub(m.OutageStart)}
		}
		m.OutageStart, m.OutageCause = time.Time{}, ""
	case m.OutageStart.IsZero():
		m.OutageStart, m.OutageCause = now, v.Reason
	case passing[m.OutageCause] && !passing[v.Reason]:
		m.OutageCause = v.Reason
	}
	if v.State == m.State && v.Reason == m.Reason {
		return m, nil, ended
	}
	m.State, m.Reason, m.Since = v.State, v.Reason, now
	ev := &RecordEvent{Time: now, Event: EventState, Tier: v.Tier, State: v.State, Reason: v.Reason, Job: v.Job,
		ExpectedBack: v.ExpectedBack}
	if v.Preemptor != nil {
		ev.Preemptor = v.Preemptor.Job
	}
	return m, ev, ended
}
