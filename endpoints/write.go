package endpoints

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FileMode is the permission of a published endpoint file: readable by the
// controller, writable only by the job's user (readers reject group- or
// world-writable files).
const FileMode fs.FileMode = 0o644

// Marshal returns the canonical bytes of e as written to its file: indented
// JSON with a final newline. It validates e first.
func Marshal(e Endpoint) ([]byte, error) {
	if err := Validate(e); err != nil {
		return nil, fmt.Errorf("marshal endpoint: %w", err)
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal endpoint: %w", err)
	}
	return append(b, '\n'), nil
}

// Write publishes e as dir/FileName(e.Tier, e.JobID), atomically: a reader
// sees the old file or the new one, never a part. The bytes go to a temp
// file in dir (named ".<name>.tmp-*", which readers ignore), are synced and
// renamed over the file. When the file already holds exactly these bytes,
// Write does nothing, so its mtime and any watcher stay quiet.
func Write(dir string, e Endpoint) error {
	b, err := Marshal(e)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, FileName(e.Tier, e.JobID))
	return WriteFileAtomic(path, b, FileMode)
}

// WriteFileAtomic writes b to path through a synced temp file in the same
// directory and a rename, with permission perm. It skips the write when path
// already holds b with permission perm (renameio's and consul-template's
// shape: nothing changes, nothing reloads).
func WriteFileAtomic(path string, b []byte, perm fs.FileMode) (err error) {
	if same, _ := sameContent(path, b, perm); same {
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
	if err := writeSyncClose(tmp, b, perm); err != nil {
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
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != perm || fi.Size() != int64(len(b)) {
		return false, err
	}
	old, err := os.ReadFile(path)
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

// Remove deletes the endpoint file of a tier and job from dir. A file that
// is already gone is not an error. The tier and job id are checked first so
// that they cannot name a path outside dir.
func Remove(dir, tier, jobID string) error {
	if err := CheckTier(tier); err != nil {
		return fmt.Errorf("remove endpoint: %w", err)
	}
	if err := CheckJobID(jobID); err != nil {
		return fmt.Errorf("remove endpoint: %w", err)
	}
	path := filepath.Join(dir, FileName(tier, jobID))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove endpoint %s: %w", path, err)
	}
	return nil
}
