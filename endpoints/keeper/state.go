package keeper

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/slurm"
)

// TierState is what the keeper remembers about one tier between passes, in
// <state_dir>/<tier>.json. The zero value is a tier never seen: enabled as
// its config says, no job, no backoff.
type TierState struct {
	// Enabled is set by an admin (`tier enable`, `tier disable`); nil means
	// the config's enabled decides.
	Enabled *bool `json:"enabled,omitempty"`
	// JobID is the tier's job as last seen or submitted ("" before any).
	JobID string `json:"job_id,omitempty"`
	// JobState is JobID's state when last seen; "" when no job was listed.
	JobState slurm.JobState `json:"job_state,omitempty"`
	// LastSeen is the last pass that saw a job of the tier listed.
	LastSeen time.Time `json:"last_seen"`
	// RunningSince is when the keeper first saw JobID RUNNING without a
	// break; zero when it is not running.
	RunningSince time.Time `json:"running_since"`
	// LastSubmit is the last submit attempt, whether sbatch succeeded or not.
	LastSubmit time.Time `json:"last_submit"`
	// Submits are the submit attempts of the last hour, oldest first (the
	// max_submits_per_hour window).
	Submits []time.Time `json:"submits"`
	// Unhealthy counts consecutive submits whose job has not (yet) been
	// seen RUNNING for healthy_reset; it sets the backoff.
	Unhealthy int `json:"unhealthy_submits"`
	// LastError and LastErrorAt are the last failure of a scheduler call or
	// a submission, kept until the next one (history, not current health).
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at"`
	// ScaleMin and ScaleMax are an admin's `tier scale` (nil: the
	// config's replicas min and max).
	ScaleMin *int `json:"scale_min,omitempty"`
	ScaleMax *int `json:"scale_max,omitempty"`
	// DemandSince is when the tier's routed replicas last began to have
	// more requests in flight than in_flight_per_replica each; zero when
	// they have not.
	DemandSince time.Time `json:"demand_since"`
	// ExtraSubmits are the extra replicas submitted in the last hour.
	ExtraSubmits []time.Time `json:"extra_submits,omitempty"`
	// Scale is the last scale check's decision, for status.
	Scale string `json:"scale,omitempty"`
}

// IsEnabled reports whether the tier is kept queued: the admin's word if
// any, else the config's.
func (s TierState) IsEnabled(cfg TierConfig) bool {
	if s.Enabled != nil {
		return *s.Enabled
	}
	return cfg.Enabled
}

// EnabledBy says who decided IsEnabled: "admin" or "config".
func (s TierState) EnabledBy() string {
	if s.Enabled != nil {
		return "admin"
	}
	return "config"
}

// stateFileMode lets the keeper's service user and an admin (root) read each
// other's files; both replace them by rename in a directory the service owns.
const stateFileMode fs.FileMode = 0o644

// Store reads and writes the state files of one state directory. The zero
// value is not usable; use NewStore.
type Store struct {
	dir string
}

// NewStore returns the store of dir; the directory is created on the first
// write or lock.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Path is the state file of tier.
func (s *Store) Path(tier string) string { return filepath.Join(s.dir, tier+".json") }

// Load reads tier's state; a missing file is the zero state.
func (s *Store) Load(tier string) (TierState, error) {
	if err := endpoints.CheckTier(tier); err != nil {
		return TierState{}, fmt.Errorf("load state: %w", err)
	}
	var st TierState
	if err := fsutil.ReadJSON(s.Path(tier), &st); err != nil {
		return TierState{}, fmt.Errorf("load state of tier %s: %w", tier, err)
	}
	return st, nil
}

// Save writes tier's state atomically (temp file, fsync, rename); a reader
// sees the old state or the new one, never a part.
func (s *Store) Save(tier string, st TierState) error {
	if err := endpoints.CheckTier(tier); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := fsutil.WriteJSON(s.Path(tier), st, stateFileMode); err != nil {
		return fmt.Errorf("save state of tier %s: %w", tier, err)
	}
	return nil
}

// Lock takes the store's exclusive flock (<dir>/.lock), waiting until ctx
// ends, so that a pass and an admin command never read-modify-write a state
// file at once. The returned func releases it. The kernel drops the lock of
// a process that dies, so a crash leaves no stale lock.
func (s *Store) Lock(ctx context.Context) (func(), error) {
	// Read-only is enough for flock, so a lock file root created stays
	// usable by the service user and the other way round.
	return fsutil.Lock(ctx, filepath.Join(s.dir, ".lock"), fsutil.ReadOnly())
}
