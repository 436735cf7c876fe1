package tiers

import (
	"maps"
	"slices"
	"time"

	"slurm-llm/endpoints/tiers/continuity"
)

// ContinueFacts are what this updater knows of each configured tier's
// drained streams, with the front door's holds given (hold: a tier's
// [front.tiers.NAME]; holdUnknown: [front] hold_unknown): the keeper's
// config as it is now and the measured start-to-ready (the tier memory,
// the watcher's when a front door reads it); not the drains, which the
// tiers' configs set (llm-supervisor check-config checks those).
func (u *Updater) ContinueFacts(hold func(tier string) continuity.FrontHold, holdUnknown time.Duration) []continuity.Facts {
	u.refreshKeeper()
	u.loadMemOnce()
	var out []continuity.Facts
	for _, name := range slices.Sorted(maps.Keys(u.cfg.Tiers)) {
		f := continuity.Facts{Tier: name, Front: hold(name), HoldUnknown: holdUnknown, StartToReady: u.mem[name].medianReady()}
		f.Release, f.ReleaseWithin, f.NoRelease = continuity.KeeperRelease(u.keeper, name)
		out = append(out, f)
	}
	return out
}
