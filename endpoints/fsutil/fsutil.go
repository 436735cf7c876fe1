// Package fsutil holds the file primitives the project's writers share: an
// atomic replace of a file (WriteFile) and an exclusive flock that waits on
// a context (Lock). Both sides use it (endpoint files, run state, keeper
// state, nginx files); it imports nothing from the project.
package fsutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile replaces path with data, atomically: a reader sees the old file
// or the new one, never a part, and a failed write leaves the old file as it
// was. The bytes go to a temp file in path's directory, named
// ".<base>.tmp-*" (hidden, with a suffix no reader's pattern matches), which
// is written, given permission perm, synced, closed and renamed over path;
// the directory is then synced so the rename survives a crash (renameio's
// shape). When path already is a regular file with permission perm holding
// exactly data, WriteFile does nothing, so its mtime and any watcher stay
// quiet (consul-template's renderer). The directory must exist.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if same, _ := sameContent(path, data, perm); same {
		return nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeSyncClose(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: rename: %w", path, err)
	}
	renamed = true
	syncDir(dir)
	return nil
}

// writeSyncClose fills the temp file, sets its mode and makes it durable.
func writeSyncClose(f *os.File, b []byte, perm fs.FileMode) error {
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// sameContent reports whether path is a regular file with permission perm
// holding exactly b. Any error means "not the same".
func sameContent(path string, b []byte, perm fs.FileMode) (bool, error) {
	// Opened without following a link or blocking, and checked on the
	// descriptor: in a shared directory the name may not be what Lstat saw.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != perm || fi.Size() != int64(len(b)) {
		return false, err
	}
	old, err := io.ReadAll(io.LimitReader(f, int64(len(b))+1))
	if err != nil {
		return false, err
	}
	return bytes.Equal(old, b), nil
}

// syncDir makes a rename in dir durable. Errors are ignored: some file
// systems (NFS, some FUSE) refuse fsync on a directory, and the rename
// itself already happened.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// ReadJSON decodes the JSON file at path into v. A missing file is not an
// error: v is left as it is (the zero state of a file never written).
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

// WriteJSON writes v to path as indented JSON with a final newline,
// atomically (WriteFile), creating path's directory first.
func WriteJSON(path string, v any, perm fs.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFile(path, append(b, '\n'), perm)
}
