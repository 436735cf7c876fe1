package members

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
)

// MaxTerm bounds a term number: a file named for a larger one is ignored
// (and its number not taken as the highest), so that the next term's
// number never overflows.
const MaxTerm = 1 << 40

// maxFileSize bounds a member or term file read (they are a few hundred bytes).
const maxFileSize = 16 << 10

// DefaultSkew is how far in the future a member file's heartbeat may be
// before the file is ignored, when the store is given no skew: a lease
// cannot be kept alive for ever by a heartbeat in 2099.
const DefaultSkew = 30 * time.Second

// Store keeps an elastic tier's member and term files in its directory,
// <endpoint_dir>/members/<tier>. Files are read as untrusted input: a
// malformed one, one of another owner than allowed, or one of another tier
// is ignored and reported. The zero value is not usable; build one with
// NewStore.
type Store struct {
	dir  string
	tier string
	// uids are the owners whose files count; empty means any.
	uids []uint32
	now  func() time.Time
	skew time.Duration
}

// NewStore returns the store of tier under endpointDir.
func NewStore(endpointDir, tier string, allowedUIDs []uint32) *Store {
	return &Store{dir: filepath.Join(endpointDir, "members", tier), tier: tier, uids: allowedUIDs, now: time.Now, skew: DefaultSkew}
}

// WithClock sets the clock and the clock skew the store allows: a member
// file whose heartbeat is further in the future than skew is ignored (the
// elastic tier's [elastic] skew: beyond it the leadership rule is not safe
// anyway). It returns the store.
func (s *Store) WithClock(now func() time.Time, skew time.Duration) *Store {
	s.now, s.skew = now, skew
	return s
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Ignored is a file the store did not take, and why.
type Ignored struct {
	File   string
	Reason string
}

// Contents is what the store holds: valid members and the highest valid
// term, and what it ignored.
type Contents struct {
	Members []Member
	Term    Term
	// Top is the highest term number among the term files' names, whether
	// or not that file could be read (a newer schema during a rolling
	// upgrade, a damaged file, another owner's): the next term is Top+1,
	// never a number that already has a file. Top > Term.N means the
	// highest term's file is unreadable.
	Top     int
	Ignored []Ignored
	// Request is the operator's request to the leader (request.json),
	// nil when there is none or it is ignored.
	Request *Request
}

// Read reads every member file and the highest term file. Neither the
// directory nor its parent may be a symlink (never followed elsewhere).
func (s *Store) Read() (Contents, error) {
	var c Contents
	for _, d := range []string{filepath.Dir(s.dir), s.dir} {
		fi, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("read members of tier %s: %w", s.tier, err)
		}
		if !fi.IsDir() {
			return c, fmt.Errorf("read members of tier %s: %s is not a directory (%s): not followed", s.tier, d, fi.Mode().Type())
		}
	}
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read members of tier %s: %w", s.tier, err)
	}
	now := s.now()
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "member-") && strings.HasSuffix(name, ".json"):
			m, err := s.readMember(name)
			if err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			if err := s.checkMember(name, m); err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			if m.Heartbeat.After(now.Add(s.skew)) {
				c.Ignored = append(c.Ignored, Ignored{name, fmt.Sprintf("heartbeat %s is more than %s in the future",
					m.Heartbeat.UTC().Format(time.RFC3339), s.skew)})
				continue
			}
			c.Members = append(c.Members, m)
		case name == requestFile:
			b, err := s.readFile(name)
			if err == nil {
				var r Request
				r, err = ParseRequest(b)
				if err == nil {
					c.Request = &r
					continue
				}
			}
			c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
		case strings.HasPrefix(name, "term-") && strings.HasSuffix(name, ".json"):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "term-"), ".json"))
			if err != nil || n < 1 || n > MaxTerm {
				c.Ignored = append(c.Ignored, Ignored{name, fmt.Sprintf("not a term file name (term-N.json, N from 1 to %d)", MaxTerm)})
				continue
			}
			c.Top = max(c.Top, n)
			if n <= c.Term.N {
				continue
			}
			b, err := s.readFile(name)
			if err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			t, err := ParseTerm(b)
			if err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			if t.N != n {
				c.Ignored = append(c.Ignored, Ignored{name, fmt.Sprintf("invalid term file: term %d in a file named for term %d", t.N, n)})
				continue
			}
			c.Term = t
		}
	}
	return c, nil
}

// readMember reads and parses one member file.
func (s *Store) readMember(name string) (Member, error) {
	b, err := s.readFile(name)
	if err != nil {
		return Member{}, err
	}
	return ParseMember(b)
}

// checkMember checks a valid member file's content against its name and tier.
func (s *Store) checkMember(name string, m Member) error {
	if m.Tier != s.tier {
		return fmt.Errorf("member of tier %s, not %s", m.Tier, s.tier)
	}
	if name != memberFile(m.JobID) {
		return fmt.Errorf("file name does not match job %s", m.JobID)
	}
	return nil
}

// readFile reads one file of the directory as untrusted input, as the
// endpoint reader does (endpoints.ReadUntrusted: no link followed, no
// blocking on a FIFO, checked on the descriptor: regular, not writable by
// group or others, an allowed owner, small). ParseMember and ParseTerm
// decode what it returns.
func (s *Store) readFile(name string) ([]byte, error) {
	return endpoints.ReadUntrusted(filepath.Join(s.dir, name), s.uids, maxFileSize)
}

// decode reads one JSON object strictly: unknown fields and trailing data
// are errors.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("parse: trailing data after the JSON object")
	}
	return nil
}

// ParseMember decodes and validates a member file's bytes (untrusted: any
// job writes the directory); the store adds the checks that need its
// context (the file's name, tier and owner, the clock).
func ParseMember(b []byte) (Member, error) {
	var m Member
	if err := decode(b, &m); err != nil {
		return Member{}, err
	}
	if err := m.Validate(); err != nil {
		return Member{}, fmt.Errorf("invalid member file: %w", err)
	}
	return m, nil
}

// ParseRequest decodes and validates a request file's bytes.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if err := decode(b, &r); err != nil {
		return Request{}, err
	}
	if err := r.Validate(); err != nil {
		return Request{}, fmt.Errorf("invalid request file: %w", err)
	}
	return r, nil
}

// requestFile is the operator's request to the leader.
const requestFile = "request.json"

// WriteRequest writes the operator's request for the tier's leader
// (atomically, replacing an older one), as the tier account.
func (s *Store) WriteRequest(r Request) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if err := s.EnsureDirs(); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	return fsutil.WriteFile(filepath.Join(s.dir, requestFile), append(b, '\n'), endpoints.FileMode)
}

// ParseTerm decodes and validates a term file's bytes.
func ParseTerm(b []byte) (Term, error) {
	var t Term
	if err := decode(b, &t); err != nil {
		return Term{}, err
	}
	if err := t.Validate(); err != nil {
		return Term{}, fmt.Errorf("invalid term file: %w", err)
	}
	return t, nil
}

// memberFile is the file name of a job's member file.
func memberFile(jobID string) string { return "member-" + jobID + ".json" }

// termFile is the file name of term n.
func termFile(n int) string { return "term-" + strconv.Itoa(n) + ".json" }

// WriteMember publishes m atomically (readers see the old file or the new one).
func (s *Store) WriteMember(m Member) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("write member: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write member: %w", err)
	}
	if err := s.EnsureDirs(); err != nil {
		return fmt.Errorf("write member: %w", err)
	}
	return fsutil.WriteFile(filepath.Join(s.dir, memberFile(m.JobID)), append(b, '\n'), endpoints.FileMode)
}

// EnsureDirs makes members/ and members/<tier>/ when missing, and checks
// that both are real directories of this account's that others cannot
// write (fsutil.CheckDir): one another user made first is refused, never
// taken (they could delete or swap the term files, or point them
// elsewhere).
func (s *Store) EnsureDirs() error {
	uid := uint32(os.Getuid())
	for _, d := range []string{filepath.Dir(s.dir), s.dir} {
		if err := fsutil.EnsureDir(d, uid); err != nil {
			return err
		}
	}
	return nil
}

// ErrTermTaken means another member created the term file first.
var ErrTermTaken = errors.New("term already taken")

// TakeTerm creates term t's file exclusively: exactly one member's call
// succeeds (O_CREAT|O_EXCL is atomic on local file systems and on NFS v3
// and later); the others get ErrTermTaken. The file is written and synced
// before the call returns, so no reader sees a term without its leader.
func (s *Store) TakeTerm(t Term) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("take term: %w", err)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("take term: %w", err)
	}
	if err := s.EnsureDirs(); err != nil {
		return fmt.Errorf("take term: %w", err)
	}
	// Written under a temporary name and linked into place: link(2) fails
	// with EEXIST if the name exists, atomically, and a reader never sees
	// a term file without its content.
	tmp, err := os.CreateTemp(s.dir, ".term-*")
	if err != nil {
		return fmt.Errorf("take term %d: %w", t.N, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), endpoints.FileMode)
	}
	if err != nil {
		return fmt.Errorf("take term %d: %w", t.N, err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(s.dir, termFile(t.N))); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ErrTermTaken
		}
		return fmt.Errorf("take term %d: %w", t.N, err)
	}
	return nil
}

// RemoveMember deletes jobID's member file if it still belongs to runID.
func (s *Store) RemoveMember(jobID, runID string) error {
	name := memberFile(jobID)
	m, err := s.readMember(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove member: %w", err)
	}
	if m.RunID != runID {
		return nil // a newer run of the job wrote it
	}
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove member: %w", err)
	}
	return nil
}
