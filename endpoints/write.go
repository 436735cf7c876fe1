package endpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"slurm-llm/endpoints/fsutil"
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
	return fsutil.WriteFile(path, b, FileMode)
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
