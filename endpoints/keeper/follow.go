package keeper

import (
	"errors"
	"io/fs"
	"os"

	"github.com/hashicorp/go-hclog"
)

// The controller's views read the keeper's config (upstreams.toml's
// keeper_config) to know which tiers it disables and whether it releases
// their requeued jobs. The watcher and the front door run for months:
// started before the file existed, or before a tier was added to it, they
// must not take Slurm's requeue hold (BeginTime, +120 s) for the tier's
// return until someone restarts them (issue 27: 121 of 739 requests got a
// 503 through a preemption the keeper undid in a second). So every pass
// looks at the file (one stat) and reads it again when it appeared,
// changed or went away: Follower does that for them.

// Follower follows the keeper's config file for a program that reads it
// beside its own (the watcher, the front door). Its zero value has read
// nothing yet; it is not safe for concurrent use.
type Follower struct {
	cfg    *Config
	stamp  os.FileInfo
	looked bool
}

// Reset forgets what was read: the next Refresh reads the file whatever
// its stamp (SIGHUP).
func (f *Follower) Reset() { *f = Follower{} }

// Refresh returns the keeper's config at path, re-reading the file when it
// is not the one last read (it appeared, was replaced or written: its
// inode, size or modification time differ) and forgetting it when it is
// gone; nil when path is "" or no config was read. A config that does not
// load is logged once per change and the last good one is kept; a read
// after the first is logged.
func (f *Follower) Refresh(path string, log hclog.Logger) *Config {
	again := f.looked
	f.looked = true
	if path == "" {
		f.cfg, f.stamp = nil, nil
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		if f.stamp != nil || f.cfg != nil || !errors.Is(err, fs.ErrNotExist) {
			log.Warn("keeper config gone; views do not know disabled tiers or released jobs", "path", path, "error", err)
		}
		f.cfg, f.stamp = nil, nil
		return nil
	}
	if f.stamp != nil && sameStamp(f.stamp, fi) {
		return f.cfg
	}
	f.stamp = fi
	kc, err := Load(path)
	if err != nil {
		what := "keeper config not read; views do not know disabled tiers or released jobs"
		if f.cfg != nil {
			what = "keeper config not read; views keep the last one read"
		}
		log.Warn(what, "path", path, "error", err)
		return f.cfg
	}
	f.cfg = &kc
	if again { // the first read, at start, goes without saying
		log.Info("keeper config read again", "path", path, "tiers", kc.TierNames())
	}
	return f.cfg
}

// sameStamp reports whether two looks at a file saw the same content: the
// same file (not one renamed over it), size and modification time.
func sameStamp(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
