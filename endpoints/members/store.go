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
	"syscall"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
)

// maxFileSize bounds a member or term file read (they are a few hundred bytes).
const maxFileSize = 16 << 10

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
}

// NewStore returns the store of tier under endpointDir.
func NewStore(endpointDir, tier string, allowedUIDs []uint32) *Store {
	return &Store{dir: filepath.Join(endpointDir, "members", tier), tier: tier, uids: allowedUIDs}
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
	Ignored []Ignored
}

// Read reads every member file and the highest term file.
func (s *Store) Read() (Contents, error) {
	var c Contents
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read members of tier %s: %w", s.tier, err)
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "member-") && strings.HasSuffix(name, ".json"):
			var m Member
			if err := s.readFile(name, &m); err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			if err := s.checkMember(name, m); err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			c.Members = append(c.Members, m)
		case strings.HasPrefix(name, "term-") && strings.HasSuffix(name, ".json"):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "term-"), ".json"))
			if err != nil || n <= c.Term.N {
				continue
			}
			var t Term
			if err := s.readFile(name, &t); err != nil {
				c.Ignored = append(c.Ignored, Ignored{name, err.Error()})
				continue
			}
			if err := t.Validate(); err != nil || t.N != n {
				c.Ignored = append(c.Ignored, Ignored{name, fmt.Sprintf("invalid term file: %v", err)})
				continue
			}
			c.Term = t
		}
	}
	return c, nil
}

// checkMember checks a member file's content against its name and tier.
func (s *Store) checkMember(name string, m Member) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("invalid member file: %w", err)
	}
	if m.Tier != s.tier {
		return fmt.Errorf("member of tier %s, not %s", m.Tier, s.tier)
	}
	if name != memberFile(m.JobID) {
		return fmt.Errorf("file name does not match job %s", m.JobID)
	}
	return nil
}

// readFile reads and decodes one file strictly: a regular file, not a
// link, of an allowed owner, small, one JSON object without unknown fields.
func (s *Store) readFile(name string, v any) error {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && len(s.uids) > 0 && !containsUID(s.uids, st.Uid) {
		return fmt.Errorf("owned by uid %d, not an allowed owner", st.Uid)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if len(b) > maxFileSize {
		return fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	return nil
}

func containsUID(uids []uint32, u uint32) bool {
	for _, x := range uids {
		if x == u {
			return true
		}
	}
	return false
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
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("write member: %w", err)
	}
	return fsutil.WriteFile(filepath.Join(s.dir, memberFile(m.JobID)), append(b, '\n'), endpoints.FileMode)
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
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
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
	var m Member
	name := memberFile(jobID)
	if err := s.readFile(name, &m); err != nil {
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
