package endpoints

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/hashicorp/go-hclog"
)

// DefaultMaxFileSize is the largest endpoint file ReadDir accepts when
// ReadOptions.MaxFileSize is zero. A real file is under 2 KiB.
const DefaultMaxFileSize = 64 << 10

// ReadOptions tunes how ReadDir treats the files it finds. The zero value
// accepts files of any owner up to DefaultMaxFileSize and logs nothing.
type ReadOptions struct {
	// AllowedUIDs lists the owners whose files are read; empty means any owner.
	AllowedUIDs []uint32
	// MaxFileSize is the size limit in bytes; zero means DefaultMaxFileSize.
	MaxFileSize int64
	// Logger receives one warning per rejected file; nil means no logging.
	Logger hclog.Logger
}

// Entry is one valid endpoint and the file it came from.
type Entry struct {
	// File is the base name of the file in the endpoint directory.
	File string `json:"file"`
	// Endpoint is the file's validated content.
	Endpoint Endpoint `json:"endpoint"`
}

// Rejected names a file ReadDir refused and why.
type Rejected struct {
	// File is the base name of the file in the endpoint directory.
	File string `json:"file"`
	// Reason says, for people, why the file was refused.
	Reason string `json:"reason"`
}

// Scan is the result of reading an endpoint directory: the valid entries and
// the refused files, each sorted by file name. The zero value is an empty scan.
type Scan struct {
	Entries  []Entry    `json:"entries"`
	Rejected []Rejected `json:"rejected"`
}

// ReadDir reads every endpoint file (*.json, not starting with '.') of dir
// as untrusted input: each file is checked (regular, not a symlink, not
// writable by group or others, owner allowed, size limited), decoded
// strictly and validated. One bad file is rejected, logged and listed in the
// Scan; it never affects the others. The error is non-nil only when dir
// itself cannot be listed.
func ReadDir(dir string, opts ReadOptions) (Scan, error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return Scan{}, fmt.Errorf("read endpoint dir %s: %w", dir, err)
	}
	var scan Scan
	for _, de := range des {
		name := de.Name()
		if !IsEndpointFileName(name) {
			continue
		}
		e, err := readFile(filepath.Join(dir, name), opts)
		if err == nil {
			err = checkName(name, e)
		}
		if err != nil {
			log.Warn("endpoint file rejected", "file", printable(name), "error", err)
			scan.Rejected = append(scan.Rejected, Rejected{File: printable(name), Reason: printable(err.Error())})
			continue
		}
		scan.Entries = append(scan.Entries, Entry{File: name, Endpoint: e})
	}
	return scan, nil
}

// printable returns name as is when it is plain printable text, else quoted,
// so a hostile file name cannot carry control characters into logs or status.
func printable(name string) string {
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

// IsEndpointFileName reports whether a directory entry is a candidate
// endpoint file: "*.json" and not hidden (Write's temp files start with '.').
func IsEndpointFileName(name string) bool {
	return strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
}

// checkName refuses a file whose name does not match its tier and job id, so
// that one file cannot pose as another tier's.
func checkName(name string, e Endpoint) error {
	if want := FileName(e.Tier, e.JobID); name != want {
		return fmt.Errorf("file name does not match content: want %s", want)
	}
	return nil
}

// ErrNotOurs is an endpoint file that exists under a job's file name but
// that its reader refuses: another owner's, not a regular file, or one
// others could rewrite. To the job whose name it is, it means the name was
// taken by someone else (squatting: a job id is public while the job is
// pending).
var ErrNotOurs = errors.New("endpoint file refused")

// refused is a check's error that also is ErrNotOurs; it reads as the
// check's own words (they go to status's WHY column as they were).
type refused struct{ err error }

func (r refused) Error() string        { return r.err.Error() }
func (r refused) Unwrap() error        { return r.err }
func (r refused) Is(target error) bool { return target == ErrNotOurs }

// ReadFile reads one endpoint file as ReadDir reads each: opened without
// following a link or blocking, checked on the descriptor, parsed strictly,
// its name checked against its content. A file that is there but fails the
// checks of the descriptor wraps ErrNotOurs.
func ReadFile(path string, opts ReadOptions) (Endpoint, error) {
	e, err := readFile(path, opts)
	if err != nil {
		return Endpoint{}, err
	}
	if err := checkName(filepath.Base(path), e); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// readFile reads path as an untrusted endpoint file and parses it.
func readFile(path string, opts ReadOptions) (Endpoint, error) {
	limit := opts.MaxFileSize
	if limit <= 0 {
		limit = DefaultMaxFileSize
	}
	b, err := ReadUntrusted(path, opts.AllowedUIDs, limit)
	if err != nil {
		return Endpoint{}, err
	}
	return Parse(b)
}

// ReadUntrusted reads a file of the shared directory that anyone may have
// put there (endpoint, member, term files): opened without following a
// symlink and without blocking (a FIFO must not hang its reader), then
// checked through the open descriptor, so that it cannot be swapped
// between check and read (checkFile: a regular file, not writable by group
// or others, of an allowed owner (empty: any), at most limit bytes). A file
// that fails those checks gives an error that is ErrNotOurs.
func ReadUntrusted(path string, allowed []uint32, limit int64) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, refused{errors.New("is a symlink")}
		}
		return nil, fmt.Errorf("open: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := checkFile(f, allowed, limit); err != nil {
		return nil, refused{err}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// checkFile refuses what must not be trusted: anything but a regular file,
// a file others could rewrite, a file of an unexpected owner, a huge file.
func checkFile(f *os.File, allowed []uint32, limit int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("writable by group or others (mode %#o)", perm)
	}
	if fi.Size() > limit {
		return fmt.Errorf("larger than %d bytes (%d)", limit, fi.Size())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("stat: no owner information")
	}
	if len(allowed) > 0 && !slices.Contains(allowed, st.Uid) {
		return fmt.Errorf("owned by uid %d, not an allowed owner", st.Uid)
	}
	return nil
}

// Parse decodes one endpoint file strictly (unknown fields, trailing data
// and a wrong schema version are errors) and validates it. It is the only
// way untrusted bytes become an Endpoint.
func Parse(b []byte) (Endpoint, error) {
	var probe struct {
		Schema *int `json:"schema"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Endpoint{}, fmt.Errorf("parse: %w", err)
	}
	if probe.Schema == nil {
		return Endpoint{}, errors.New("parse: no schema field")
	}
	if v := *probe.Schema; v < MinSchemaVersion || v > SchemaVersion {
		return Endpoint{}, fmt.Errorf("parse: unknown schema version %d (this build reads %d to %d)", v, MinSchemaVersion, SchemaVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Endpoint
	if err := dec.Decode(&e); err != nil {
		return Endpoint{}, fmt.Errorf("parse: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Endpoint{}, errors.New("parse: trailing data after the JSON object")
	}
	if err := Validate(e); err != nil {
		return Endpoint{}, fmt.Errorf("invalid: %w", err)
	}
	return e, nil
}

// PublicRule is the rule a refused file broke, in fixed words, for what
// anyone may read (a tier's 503, its view's reason): which check failed,
// never what the file says. A reason (Rejected.Reason, a read error) may
// quote the file's content, which anyone who can write the shared
// directory chooses; it stays in the logs and the operator's status.
func PublicRule(reason string) string {
	for _, r := range publicRules {
		if strings.HasPrefix(reason, r.prefix) {
			return r.rule
		}
	}
	return "its content is not a valid endpoint file"
}

// publicRules map the fixed first words of the readers' reasons (ReadDir's
// and the watcher's cached scan say the same) to their rules.
var publicRules = []struct{ prefix, rule string }{
	{"is a symlink", "it is a symlink"},
	{"not a regular file", "it is not a regular file"},
	{"writable by group or others", "others can write it"},
	{"owned by uid", "its owner is not an allowed owner"},
	{"larger than", "it is larger than max_file_size"},
	{"open:", "it cannot be read"},
	{"read:", "it cannot be read"},
	{"stat:", "it cannot be read"},
	{"file name does not match content", "its name does not match its tier and job id"},
}
