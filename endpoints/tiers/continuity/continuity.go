// Package continuity is the rule that says whether a stream cut by its
// tier's drain would be continued (Check), from what each
// program knows: the drain (the tier's config), the front door's holds
// ([front]), the keeper's release (keeper.toml) and the measured
// start-to-ready (the core's memory, tiers.Updater.Facts).
package continuity

import (
	"fmt"
	"time"

	"slurm-llm/endpoints/keeper"
)

// A stream still running at its drain's in-flight deadline is cut there;
// the front door holds it and continues it on the tier's next head when
// the tier can be back within its hold (Decide). After the cut come the
// drain's ordered stop (the head's stop_grace, the last resort), Slurm's
// requeue, the keeper's release of the requeue's hold, the start and the
// load. Whether that fits is a matter of settings in three files that two
// programs read: the drain in the tier's config (llm-supervisor), the
// holds in upstreams.toml [front] and the release in keeper.toml (the
// controller). Check is the rule; each program gives it what
// it knows (check-config: the drain and, when it finds them, the other
// two files; the front door's start: the holds, the keeper and the
// measured start-to-ready).

// requeueSlack is the time from a drain's end to Slurm listing the
// requeued job PENDING, plus the start of a released job on a free node:
// 1–3 s measured (slurm-facts 21; issue 27's e2e: 1.65 s from the endpoint
// file's removal to the tier's next run starting).
const requeueSlack = 5 * time.Second

// SlurmRequeueHold is how long Slurm holds a requeued job (BeginTime)
// when nobody releases it: the job credential's lifetime, 120 s, + 1 s
// (slurm-facts 24).
const SlurmRequeueHold = 121 * time.Second

// Facts are what a program knows about one tier's drained
// streams; a zero duration is "not known here".
type Facts struct {
	Tier string
	// Front is the tier's [front.tiers.NAME] hold and continue;
	// HoldUnknown [front]'s hold_unknown.
	Front       FrontHold
	HoldUnknown time.Duration
	// Release: the keeper keeps the tier and releases its requeued job, at
	// most ReleaseWithin after the requeue; else NoRelease says why not.
	Release       bool
	ReleaseWithin time.Duration
	NoRelease     string
	// InFlight and Stop are the tier's drain split: the wait for requests
	// in flight (the cut comes at its end) and the ordered stop after it.
	InFlight, Stop time.Duration
	// StartToReady is the tier's measured time from a job's start to
	// routed.
	StartToReady time.Duration
}

// FrontHold is what the rule weighs of a tier's [front.tiers.NAME]: the
// front door's package reads that table (front.Config.Hold gives this).
type FrontHold struct {
	// Hold is how long a request waits for the tier to come back.
	Hold time.Duration
	// Continue: a stream cut before its end is continued on another head.
	Continue bool
}

// KeeperRelease says whether kc's keeper releases tier's requeued job and
// how soon after the requeue at the latest; why says why not. kc nil: no
// keeper config.
func KeeperRelease(kc *keeper.Config, tier string) (release bool, within time.Duration, why string) {
	if kc == nil {
		return false, 0, "no keeper config (keeper_config)"
	}
	tc, ok := kc.Tiers[tier]
	switch {
	case !ok:
		return false, 0, fmt.Sprintf("the keeper (%s) does not keep tier %s", kc.Path, tier)
	case !tc.Release:
		return false, 0, fmt.Sprintf("release = false for tier %s in %s", tier, kc.Path)
	case kc.ReleaseInterval <= 0:
		return false, 0, fmt.Sprintf("release_interval = 0 in %s", kc.Path)
	}
	return true, kc.ReleaseDelay + kc.ReleaseInterval, ""
}

// Check lists why a stream of the tier cut by its drain's
// deadline would not be continued (nil when nothing says so). It is pure.
func Check(f Facts) []string {
	var out []string
	if !f.Front.Continue {
		out = append(out, fmt.Sprintf("[front.tiers.%s] continue = false: a cut stream ends with an error event", f.Tier))
	}
	if f.Front.Hold <= 0 {
		return append(out, fmt.Sprintf("[front.tiers.%s] hold = 0s: nothing is held for the tier", f.Tier))
	}
	if f.HoldUnknown < f.ReleaseWithin+requeueSlack {
		out = append(out, fmt.Sprintf("[front] hold_unknown = %s: between a drain's end and the tier's next run starting "+
			"(the requeue, the keeper's release within %s, Slurm's start: about %s) the view may have no estimate, "+
			"and a cut stream is then not held", f.HoldUnknown, f.ReleaseWithin, f.ReleaseWithin+requeueSlack))
	}
	release := f.ReleaseWithin
	if !f.Release {
		release = SlurmRequeueHold
	}
	earliest := f.Stop + release + f.StartToReady
	if f.Front.Hold < earliest {
		out = append(out, fmt.Sprintf("[front.tiers.%s] hold = %s: after the cut the tier is back at the earliest %s later (%s)",
			f.Tier, f.Front.Hold, earliest, f.parts(release)))
	}
	return out
}

// parts names what the earliest return after a cut is made of.
func (f Facts) parts(release time.Duration) string {
	s := ""
	if f.Stop > 0 {
		s = fmt.Sprintf("the drain's ordered stop %s, ", f.Stop)
	}
	if f.Release {
		s += fmt.Sprintf("the keeper's release %s", release)
	} else {
		s += fmt.Sprintf("Slurm's requeue hold %s: %s", release, f.NoRelease)
	}
	if f.StartToReady > 0 {
		s += fmt.Sprintf(", the measured start-to-ready %s", f.StartToReady)
	} else {
		s += ", then the start and the load"
	}
	return s
}
