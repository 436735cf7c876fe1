package tiers

import (
	"encoding/json"
	"maps"
	"os"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
)

// fencePath is where the highest restart count seen per tier and job is
// kept between passes, next to the lock, so that the timer's sync and the
// watcher fence alike: an older run that rewrites its file after a requeue
// stays superseded in every process. Lost on reboot (/run), which is fine:
// such a stale run does not survive its node's reboot either.
func (u *Updater) fencePath() string { return u.cfg.LockFile + ".fences.json" }

// loadFences merges the fence file into the in-memory fences. A missing or
// unreadable file adds nothing: fencing is a refinement, not a gate.
func (u *Updater) loadFences() map[string]int {
	merged := maps.Clone(u.fences)
	if merged == nil {
		merged = map[string]int{}
	}
	b, err := os.ReadFile(u.fencePath())
	if err != nil {
		return merged
	}
	var saved map[string]int
	if err := json.Unmarshal(b, &saved); err != nil {
		u.opts.Log.Warn("ignoring unreadable fence file", "path", u.fencePath(), "error", err)
		return merged
	}
	for k, v := range saved {
		if c, ok := merged[k]; !ok || v > c {
			merged[k] = v
		}
	}
	return merged
}

// saveFences keeps the fences of tier/jobs that still have a file and
// writes them (only when they changed; the write skips equal bytes).
func (u *Updater) saveFences(entries []endpoints.Entry) {
	u.fences = pruneFences(endpoints.LatestRestarts(entries, u.fences), entries)
	b, err := json.Marshal(u.fences) // map keys are sorted: stable bytes
	if err != nil {
		return
	}
	if err := fsutil.WriteFile(u.fencePath(), append(b, '\n'), 0o644); err != nil {
		u.opts.Log.Warn("cannot save fences", "path", u.fencePath(), "error", err)
	}
}

// pruneFences keeps the fences of tier/jobs that still have a file, so the
// map does not grow with every job ever seen.
func pruneFences(fences map[string]int, entries []endpoints.Entry) map[string]int {
	keep := make(map[string]int, len(entries))
	for _, en := range entries {
		k := endpoints.FenceKey(en.Endpoint.Tier, en.Endpoint.JobID)
		keep[k] = fences[k]
	}
	return keep
}
