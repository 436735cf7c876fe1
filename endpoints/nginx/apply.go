package nginx

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/fsutil"
	"slurm-llm/endpoints/tiers"
)

// Errors of Apply a caller may count apart. Both leave the last good files
// in place; the running nginx was not touched.
// They wrap the core's classes (tiers.ErrRefused, tiers.ErrNotSwitched),
// which the pass's metrics count.
var (
	// ErrTestFailed: nginx -t refused the candidate files; they were rolled back.
	ErrTestFailed error = &classed{"nginx config test failed", tiers.ErrRefused}
	// ErrReloadFailed: the reload command failed; the files were rolled back.
	ErrReloadFailed error = &classed{"nginx reload failed", tiers.ErrNotSwitched}
)

// classed is an error with its own text that is also its class.
type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }
func (e *classed) Unwrap() error { return e.class }

// stampFile records, in the output dir, a digest of the file set that was
// last tested and reloaded. A set on disk that does not match it (a crash
// between write and reload) is tested and reloaded again.
const stampFile = ".llm-upstreams-applied"

// Runner runs a command given as argv (never through a shell) and returns
// its combined output. ExecRunner is the real one.
type Runner interface {
	Run(ctx context.Context, argv []string) ([]byte, error)
}

// Applier puts rendered upstream files in place safely. Its zero value is
// not usable; fill every field.
type Applier struct {
	// Dir is the output directory the nginx site includes files from.
	Dir string
	// Test and Reload are argv for "nginx -t" and "nginx -s reload".
	Test, Reload []string
	// Runner runs them.
	Runner Runner
	// Log receives what was done.
	Log hclog.Logger
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	// Changed lists the files whose bytes changed (sorted as given).
	Changed []string
	// Reloaded reports whether nginx was reloaded.
	Reloaded bool
}

// prior is what a changed file held before Apply touched it.
type prior struct {
	file    string
	old     []byte
	existed bool
}

// Apply makes the output dir hold ups and nginx run them. When the files
// already hold these bytes and were applied, it does nothing (no reload).
// Else it writes the changed files in place (each atomically), runs the
// test on the real nginx config, which includes them, then reloads. If the
// test or the reload fails, the previous files are put back, so the running
// nginx and the files on disk stay the last good config; the error wraps
// ErrTestFailed or ErrReloadFailed.
func (a *Applier) Apply(ctx context.Context, ups []Upstream) (ApplyResult, error) {
	digest := setDigest(ups)
	priors, err := a.changedFiles(ups)
	if err != nil {
		return ApplyResult{}, err
	}
	stamp, _ := os.ReadFile(filepath.Join(a.Dir, stampFile))
	if len(priors) == 0 && string(stamp) == digest {
		return ApplyResult{}, nil
	}
	if err := os.MkdirAll(a.Dir, 0o755); err != nil {
		return ApplyResult{}, fmt.Errorf("apply: %w", err)
	}
	res := ApplyResult{}
	for _, p := range priors {
		res.Changed = append(res.Changed, p.file)
	}
	if err := a.writeAll(ups, priors); err != nil {
		return res, err
	}
	if out, err := a.Runner.Run(ctx, a.Test); err != nil {
		a.rollback(priors)
		return res, fmt.Errorf("apply %v: %w: %v: %s", res.Changed, ErrTestFailed, err, bytes.TrimSpace(out))
	}
	if out, err := a.Runner.Run(ctx, a.Reload); err != nil {
		a.rollback(priors)
		return res, fmt.Errorf("apply %v: %w: %v: %s", res.Changed, ErrReloadFailed, err, bytes.TrimSpace(out))
	}
	res.Reloaded = true
	if err := fsutil.WriteFile(filepath.Join(a.Dir, stampFile), []byte(digest), 0o644); err != nil {
		a.Log.Warn("cannot record applied set; next pass reloads again", "error", err)
	}
	a.Log.Info("nginx reloaded", "changed", res.Changed)
	return res, nil
}

// changedFiles returns, for each upstream whose file differs from its
// bytes, what the file held before.
func (a *Applier) changedFiles(ups []Upstream) ([]prior, error) {
	var out []prior
	for _, u := range ups {
		old, err := os.ReadFile(filepath.Join(a.Dir, u.File))
		existed := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("read live %s: %w", u.File, err)
		}
		if existed && bytes.Equal(old, u.Bytes) {
			continue
		}
		out = append(out, prior{file: u.File, old: old, existed: existed})
	}
	return out, nil
}

// writeAll writes the changed files; on a failure it restores those done.
func (a *Applier) writeAll(ups []Upstream, priors []prior) error {
	want := make(map[string][]byte, len(ups))
	for _, u := range ups {
		want[u.File] = u.Bytes
	}
	for i, p := range priors {
		if err := fsutil.WriteFile(filepath.Join(a.Dir, p.file), want[p.file], 0o644); err != nil {
			a.rollback(priors[:i])
			return fmt.Errorf("apply: %w", err)
		}
	}
	return nil
}

// rollback puts back what each changed file held (or removes a new file).
func (a *Applier) rollback(priors []prior) {
	for _, p := range priors {
		path := filepath.Join(a.Dir, p.file)
		var err error
		if p.existed {
			err = fsutil.WriteFile(path, p.old, 0o644)
		} else if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err != nil {
			a.Log.Error("rollback failed; file on disk is not the last good one", "file", path, "error", err)
		}
	}
}

// setDigest is a digest of the whole file set: names, lengths and bytes.
func setDigest(ups []Upstream) string {
	h := sha256.New()
	for _, u := range ups {
		fmt.Fprintf(h, "%s\x00%d\x00", u.File, len(u.Bytes))
		h.Write(u.Bytes)
	}
	return hex.EncodeToString(h.Sum(nil)) + "\n"
}
