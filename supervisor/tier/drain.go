package tier

import "time"

// Margins of an ordered stop beyond timeouts.stop_grace.
const (
	// ShimMargin is how much longer than stop_grace a step run under the
	// shim (every srun step) may take to stop: the shim runs the grace
	// itself, then its SIGKILL, then srun reports.
	ShimMargin = 2 * time.Second
	// KillMargin bounds the last resort after a grace ran out: SIGKILL of
	// the srun client and scancel of its step.
	KillMargin = 2 * time.Second
	// MinInFlightWait is the least a drain budget must leave for requests in
	// flight once the ordered stop is paid for.
	MinInFlightWait = time.Second
)

// DrainSplit is how an ordered stop spends drain.budget, counted from the
// stop notice (or from Slurm's PreemptTime when it is earlier): first the
// wait for requests in flight, then the head's stop, then the workers'
// (together), then the last resort. It is computed in one place (Split)
// for validation, check-config, the runner's deadline and the shim's hold.
type DrainSplit struct {
	// Budget is drain.budget.
	Budget time.Duration
	// InFlight is the longest wait for requests in flight: what is left.
	InFlight time.Duration
	// HeadStop and WorkerStop are stop_grace plus the launcher's margin;
	// WorkerStop is 0 for a single tier.
	HeadStop, WorkerStop time.Duration
	// Save is the share of the in-flight wait kept, at its end, for saving
	// the head's slots (0 when the tier saves none): the wait for requests
	// in flight ends Save earlier, and the saves end by InFlight + Save, so
	// the stop that follows is paid for as without them.
	Save time.Duration
	// Kill is KillMargin.
	Kill time.Duration
	// ShimHold is how long a step's shim keeps its process through Slurm's
	// SIGTERM when the supervisor never says stop (it hung or died): the
	// budget minus stop_grace, so that even then the process is gone within
	// the budget.
	ShimHold time.Duration
}

// Split returns the drain split of a tier of kind with the given settings.
// stopMargin is the launcher's margin beyond stop_grace: ShimMargin for
// srun steps (what validation and check-config assume), 0 for processes
// started locally.
func Split(kind Kind, t Timeouts, d DrainSettings, stopMargin time.Duration) DrainSplit {
	s := DrainSplit{Budget: d.Budget, HeadStop: t.StopGrace + stopMargin, Kill: KillMargin,
		ShimHold: d.Budget - t.StopGrace}
	if kind == KindDistributed {
		s.WorkerStop = s.HeadStop
	}
	s.InFlight = d.Budget - s.HeadStop - s.WorkerStop - s.Kill
	return s
}

// Stop is the time the ordered stop itself takes at most.
func (s DrainSplit) Stop() time.Duration { return s.HeadStop + s.WorkerStop + s.Kill }

// Split is the plan's drain split for a launcher with stopMargin.
func (p *Plan) Split(stopMargin time.Duration) DrainSplit {
	s := Split(p.Kind, p.Timeouts, p.Drain, stopMargin)
	if p.SlotSave.Dir != "" {
		s = s.WithSaves()
	}
	return s
}

// WithSaves is the split of a tier that saves its head's slots: SaveShare
// of the in-flight wait goes to the saves.
func (s DrainSplit) WithSaves() DrainSplit {
	s.Save = s.InFlight * SaveShare / 100
	s.InFlight -= s.Save
	return s
}

// SaveShare is the percentage of the in-flight wait a tier that saves its
// head's slots keeps for the saves (DrainSplit.Save): with the defaults
// (a single tier's 16 s) 8 s, in which a 3 GB slot needs 375 MB/s.
const SaveShare = 50
