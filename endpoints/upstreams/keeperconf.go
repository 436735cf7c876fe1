package upstreams

import (
	"errors"
	"io/fs"
	"os"

	"slurm-llm/endpoints/keeper"
)

// The views read the keeper's config (keeper_config) to know which tiers
// it disables and whether it releases their requeued jobs. The watcher
// and the front door run for months: started before the file existed, or
// before a tier was added to it, they must not take Slurm's requeue hold
// (BeginTime, +120 s) for the tier's return until someone restarts them
// (issue 27: 121 of 739 requests got a 503 through a preemption the keeper
// undid in a second). So every pass looks at the file (one stat) and
// reads it again when it appeared, changed or went away.

// refreshKeeper re-reads keeper_config when the file is not the one last
// read (it appeared, was replaced or written: its inode, size or
// modification time differ) and forgets it when it is gone. A config that
// does not load is logged once per change and the last good one is kept;
// one read after the start is logged.
func (u *Updater) refreshKeeper() {
	again := u.keeperLooked
	u.keeperLooked = true
	path := u.cfg.KeeperConfig
	if path == "" {
		u.keeper, u.keeperFile = nil, nil
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		if u.keeperFile != nil || u.keeper != nil || !errors.Is(err, fs.ErrNotExist) {
			u.opts.Log.Warn("keeper config gone; views do not know disabled tiers or released jobs", "path", path, "error", err)
		}
		u.keeper, u.keeperFile = nil, nil
		return
	}
	if u.keeperFile != nil && sameStamp(u.keeperFile, fi) {
		return
	}
	u.keeperFile = fi
	kc, err := keeper.Load(path)
	if err != nil {
		what := "keeper config not read; views do not know disabled tiers or released jobs"
		if u.keeper != nil {
			what = "keeper config not read; views keep the last one read"
		}
		u.opts.Log.Warn(what, "path", path, "error", err)
		return
	}
	u.keeper = &kc
	if again { // the first read, at start, goes without saying
		u.opts.Log.Info("keeper config read again", "path", path, "tiers", kc.TierNames())
	}
}

// sameStamp reports whether two looks at a file saw the same content: the
// same file (not one renamed over it), size and modification time.
func sameStamp(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
