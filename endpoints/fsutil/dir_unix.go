package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrUnsafeDir is a shared directory that others could change under the
// files the product keeps there: a symlink, not a directory, another
// account's, or writable by others. Its error says how to fix it.
var ErrUnsafeDir = errors.New("unsafe shared directory")

// CheckDir checks a directory of the shared file system the product writes
// or trusts (the endpoint directory, members/, members/<tier>/): a real
// directory (a symlink is refused, not followed), owned by owner, not
// writable by others (group write is the site's choice: the controller's
// group may need it to remove stale files). The error names the path, what
// is wrong and the commands that fix it.
func CheckDir(path string, owner uint32) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("directory %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %s: no owner information", path)
	}
	fix := fmt.Sprintf("as root: chown %d %s && chmod o-w %s (or remove it and let the tier create it)", owner, path, path)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink, not a directory: replace it with a directory owned by uid %d, mode 0755",
			ErrUnsafeDir, path, owner)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory (%s)", ErrUnsafeDir, path, fi.Mode().Type())
	case st.Uid != owner:
		return fmt.Errorf("%w: %s is owned by uid %d, not by this account (uid %d): another user may have created it first; %s",
			ErrUnsafeDir, path, st.Uid, owner, fix)
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("%w: %s is writable by others (mode %#o): anyone could plant or squat files there; %s",
			ErrUnsafeDir, path, fi.Mode().Perm(), fix)
	}
	return nil
}

// DescribeDir says, for people (check-config, run by an admin who may not
// be the tier's account), whether path is safe: not a symlink, a
// directory, not writable by others, and whose it is; ok is false when it
// is not safe or cannot be seen.
func DescribeDir(path string) (string, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Sprintf("not checked here: %v", err), false
	}
	if err := CheckShared(path); err != nil {
		return err.Error(), false
	}
	uid := fi.Sys().(*syscall.Stat_t).Uid // CheckShared found it
	return fmt.Sprintf("a directory owned by uid %d, mode %#o: the tier's jobs must run as uid %d", uid, fi.Mode().Perm(), uid), true
}

// EnsureDir makes path (mode 0755) when it is missing and checks it with
// CheckDir: a directory that exists already must be a safe one of owner's,
// never taken as it is (MkdirAll would accept another user's).
func EnsureDir(path string, owner uint32) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("make directory %s: %w", path, err)
	}
	return CheckDir(path, owner)
}

// CheckShared is CheckDir for a reader that is not the directory's owner
// (the controller reads the tier account's endpoint directory): a real
// directory, not writable by others; whose it is is not checked.
func CheckShared(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("directory %s: %w", path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %s: no owner information", path)
	}
	return CheckDir(path, st.Uid)
}
