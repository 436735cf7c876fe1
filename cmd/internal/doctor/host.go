package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"slurm-llm/endpoints/access"
)

// Cmd is one command the gathering runs: a program and its arguments (no
// shell), and what to write to its standard input.
type Cmd struct {
	Name  string
	Args  []string
	Stdin string
}

// String is the command as an admin would type it, for messages.
func (c Cmd) String() string { return strings.Join(append([]string{c.Name}, c.Args...), " ") }

// Output is what a command did. Missing means the program is not
// installed (not in PATH): a fact of its own, not a failure of the command.
type Output struct {
	Stdout, Stderr string
	// Err is the run's error (a non-zero exit, a timeout), nil on success.
	Err     error
	Missing bool
}

// Text is the output's stdout and stderr, trimmed, for parsing either.
func (o Output) Text() string { return strings.TrimSpace(o.Stdout + "\n" + o.Stderr) }

// Host is where the facts come from: commands, files and directories.
// NewHost is the real one; tests fill it with fakes.
type Host struct {
	// Run runs a command; it must not be nil.
	Run func(ctx context.Context, c Cmd) Output
	// ReadFile reads a file (a unit, nginx.conf).
	ReadFile func(path string) ([]byte, error)
	// Stat describes a path without following a final symlink.
	Stat func(path string) Entry
	// WriteSpeed measures how fast size bytes are written and synced in a
	// directory (bytes/s); nil: not measured.
	WriteSpeed func(dir string, size int64) (float64, error)
}

// Entry is what Stat saw at a path. Err is set (and nothing else) when it
// could not be seen; a missing path has NotExist set as well.
type Entry struct {
	Path      string
	Err       error
	NotExist  bool
	IsDir     bool
	IsSymlink bool
	Mode      fs.FileMode // permission and sticky bits
	UID, GID  uint32
	// Owner and Group are the names of UID and GID ("" when unknown).
	Owner, Group string
}

// commandTimeout bounds each command: sacctmgr with no slurmdbd, or nginx
// -T on a site with slow resolvers, must not hang the doctor.
const commandTimeout = 15 * time.Second

// NewHost is the real host: commands run with a timeout, files read and
// stat'ed from the file system; names come from lookup (uid → name,
// gid → name), nil for numbers only.
func NewHost(lookup func(uid, gid uint32) (string, string)) Host {
	return Host{Run: runCommand, ReadFile: os.ReadFile, Stat: func(p string) Entry { return statPath(p, lookup) },
		WriteSpeed: measureWrite}
}

// runCommand runs c with commandTimeout, in its own process group (killed
// whole at the timeout).
func runCommand(ctx context.Context, c Cmd) Output {
	if _, err := exec.LookPath(c.Name); err != nil {
		return Output{Missing: true, Err: fmt.Errorf("look up %s: %w", c.Name, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	cmd.Stdin = strings.NewReader(c.Stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%s: timed out after %s: %w", c, commandTimeout, err)
	} else if err != nil {
		err = fmt.Errorf("%s: %w", c, err)
	}
	return Output{Stdout: out.String(), Stderr: errOut.String(), Err: err}
}

// statPath is Host.Stat on the real file system.
func statPath(path string, lookup func(uid, gid uint32) (string, string)) Entry {
	fi, err := os.Lstat(path)
	if err != nil {
		return Entry{Path: path, Err: err, NotExist: errors.Is(err, fs.ErrNotExist)}
	}
	e := Entry{Path: path, IsDir: fi.IsDir(), IsSymlink: fi.Mode()&fs.ModeSymlink != 0,
		Mode: fi.Mode() & (fs.ModePerm | fs.ModeSticky)}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		if lookup != nil {
			e.Owner, e.Group = lookup(st.Uid, st.Gid)
		}
	}
	return e
}

// SystemNames names a file's owner and group for the report, through NSS
// as the key endpoint does (getent when os/user, built without cgo,
// reads /etc/passwd alone), so LDAP users have names too; a number when
// the name is unknown.
func SystemNames(uid, gid uint32) (string, string) {
	owner, err := access.OSUsers{}.Name(uid)
	if err != nil {
		owner = fmt.Sprintf("uid %d", uid)
	}
	group := fmt.Sprintf("gid %d", gid)
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		group = g.Name
	}
	return owner, group
}
