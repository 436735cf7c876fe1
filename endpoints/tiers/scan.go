package tiers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"slurm-llm/endpoints"
)

// scanner reads the endpoint directory as endpoints.ReadDir does (same
// checks, same reasons, same order) but remembers what each file parsed
// to, keyed by the file's identity (device, inode, size, mtime, ctime), so
// that a sweep over unchanged files costs an open and an fstat per file
// instead of a read and a JSON parse. The checks that depend on the file's
// metadata (regular file, mode, size, owner) run on every scan, on the
// open descriptor: only the parse is cached. It also gives each entry's
// owner, read from the same descriptor as its content, for the check that
// a file's job belongs to the file's owner. The zero value is ready; it is
// owned by the updater's goroutine.
//
// Open, not lstat: on NFS, open revalidates the file's attributes with the
// server (close-to-open consistency), where a stat may answer from the
// attribute cache for seconds.
type scanner struct {
	cache map[string]parsed
	// now is the local clock, for the racy-file rule.
	now func() time.Time
	// maxFiles caps the files read per scan (0: no cap); tiers are the
	// configured tiers, whose file names are read first when the cap
	// bites (junk names cannot push the real files out).
	maxFiles int
	tiers    []string
}

// DefaultMaxFiles is the default cap on endpoint files read per pass
// (max_files): a cluster has tens of tier jobs, a few hundred at most.
const DefaultMaxFiles = 4096

// fileID is what tells a file's content apart without reading it.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns
}

// parsed is what a file's bytes gave: an endpoint, or the reason it was
// refused (a parse or name error; reasons from metadata are not cached).
type parsed struct {
	id     fileID
	ep     endpoints.Endpoint
	reason string
}

// racyWindow: a file modified this close to (or after) the moment it was
// read may be rewritten in place within the same timestamp tick, with the
// same size, and look unchanged; its parse is not reused. Endpoint writers
// rename a new file into place (a new inode), so this only matters for
// files edited in place.
const racyWindow = time.Second

// scanResult is one scan: the entries and rejections as ReadDir gives
// them, each entry's owner uid, and how many files were parsed (not taken
// from the cache).
type scanResult struct {
	scan   endpoints.Scan
	owners map[string]uint32
	parsed int
	// skipped counts the files not read for the cap (maxFiles).
	skipped int
}

// scan reads dir. The error is non-nil only when dir itself cannot be
// listed.
func (s *scanner) scan(dir string, allowed []uint32, limit int64) (scanResult, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return scanResult{}, fmt.Errorf("read endpoint dir %s: %w", dir, err)
	}
	if limit <= 0 {
		limit = endpoints.DefaultMaxFileSize
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	next := make(map[string]parsed, len(s.cache))
	res := scanResult{owners: map[string]uint32{}}
	names := make([]string, 0, len(des))
	for _, de := range des {
		if name := de.Name(); endpoints.IsEndpointFileName(name) {
			names = append(names, name)
		}
	}
	names, res.skipped = s.capped(names)
	for _, name := range names {
		e, uid, err := s.readFile(filepath.Join(dir, name), name, allowed, limit, now, next, &res.parsed)
		if err != nil {
			res.scan.Rejected = append(res.scan.Rejected, endpoints.Rejected{File: printable(name), Reason: printable(err.Error())})
			continue
		}
		res.scan.Entries = append(res.scan.Entries, endpoints.Entry{File: name, Endpoint: e})
		res.owners[name] = uid
	}
	s.cache = next
	return res, nil
}

// capped keeps at most maxFiles of names (sorted, as os.ReadDir gives
// them), the configured tiers' names first, and says how many it left out;
// what it keeps is in name order again.
func (s *scanner) capped(names []string) ([]string, int) {
	if s.maxFiles <= 0 || len(names) <= s.maxFiles {
		return names, 0
	}
	known := func(name string) bool {
		for _, t := range s.tiers {
			if strings.HasPrefix(name, t+"-") {
				return true
			}
		}
		return false
	}
	kept := make([]string, 0, s.maxFiles)
	for _, pass := range []bool{true, false} {
		for _, name := range names {
			if len(kept) < s.maxFiles && known(name) == pass {
				kept = append(kept, name)
			}
		}
	}
	slices.Sort(kept)
	return kept, len(names) - len(kept)
}

// readFile checks and (unless cached) parses one file, as endpoints'
// readFile does, and records its parse in next. A cached file costs three
// system calls (open, fstat, close): os.File is used only to read.
func (s *scanner) readFile(path, name string, allowed []uint32, limit int64, now func() time.Time,
	next map[string]parsed, parsedCount *int) (endpoints.Endpoint, uint32, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return endpoints.Endpoint{}, 0, errors.New("is a symlink")
		}
		return endpoints.Endpoint{}, 0, fmt.Errorf("open: %w", err)
	}
	id, uid, err := checkFile(fd, allowed, limit)
	if err == nil {
		if p, ok := s.cache[name]; ok && p.id == id {
			syscall.Close(fd)
			next[name] = p
			return p.result(uid)
		}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err != nil {
		return endpoints.Endpoint{}, 0, err
	}
	readAt := now()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return endpoints.Endpoint{}, 0, fmt.Errorf("read: %w", err)
	}
	if int64(len(b)) > limit {
		return endpoints.Endpoint{}, 0, fmt.Errorf("larger than %d bytes", limit)
	}
	*parsedCount++
	p := parsed{id: id}
	if e, err := endpoints.Parse(b); err != nil {
		p.reason = err.Error()
	} else if want := endpoints.FileName(e.Tier, e.JobID); name != want {
		p.reason = "file name does not match content: want " + want
	} else {
		p.ep = e
	}
	if time.Unix(0, id.mtime).Before(readAt.Add(-racyWindow)) {
		next[name] = p
	}
	return p.result(uid)
}

// result is the parse as ReadDir's outcome for a file owned by uid.
func (p parsed) result(uid uint32) (endpoints.Endpoint, uint32, error) {
	if p.reason != "" {
		return endpoints.Endpoint{}, 0, errors.New(p.reason)
	}
	return p.ep, uid, nil
}

// checkFile refuses what must not be trusted, with endpoints' reasons, on
// the open descriptor fd: not a regular file, writable by group or others,
// too large, an owner not allowed (empty allowed: any). It returns the
// file's identity and owner.
func checkFile(fd int, allowed []uint32, limit int64) (fileID, uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fileID{}, 0, fmt.Errorf("stat: %w", err)
	}
	mode := fileMode(st.Mode)
	if !mode.IsRegular() {
		return fileID{}, 0, fmt.Errorf("not a regular file (%s)", mode.Type())
	}
	if perm := mode.Perm(); perm&0o022 != 0 {
		return fileID{}, 0, fmt.Errorf("writable by group or others (mode %#o)", perm)
	}
	if st.Size > limit {
		return fileID{}, 0, fmt.Errorf("larger than %d bytes (%d)", limit, st.Size)
	}
	if len(allowed) > 0 && !slices.Contains(allowed, st.Uid) {
		return fileID{}, 0, fmt.Errorf("owned by uid %d, not an allowed owner", st.Uid)
	}
	id := fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, //nolint:unconvert // Dev is uint32 on some platforms
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	return id, st.Uid, nil
}

// fileMode is a stat mode as os.FileMode (what os.File.Stat's Mode gives),
// so that reasons read as endpoints.ReadDir's.
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFBLK:
		mode |= os.ModeDevice
	case syscall.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFDIR:
		mode |= os.ModeDir
	case syscall.S_IFIFO:
		mode |= os.ModeNamedPipe
	case syscall.S_IFLNK:
		mode |= os.ModeSymlink
	case syscall.S_IFSOCK:
		mode |= os.ModeSocket
	}
	if m&syscall.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&syscall.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// printable returns s as is when it is plain printable text, else quoted
// (endpoints.ReadDir's rule), so a hostile file name cannot carry control
// characters into logs or status.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
