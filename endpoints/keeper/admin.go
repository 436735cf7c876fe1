package keeper

import (
	"context"
	"errors"
	"fmt"

	"slurm-llm/slurm"
)

// EnableTier marks tier enabled by an admin and clears its backoff and
// hourly count, so the next pass submits at once if the tier has no job.
func (k *Keeper) EnableTier(ctx context.Context, tier string) error {
	return k.update(ctx, tier, func(st TierState) TierState { return Enable(st) })
}

// DisableTier marks tier disabled by an admin: no pass submits it again
// until EnableTier. With cancel it then scancels every job listed under the
// tier's name and returns their ids. The tier stays disabled even when the
// cancel fails (the error says so).
func (k *Keeper) DisableTier(ctx context.Context, tier string, cancel bool) ([]string, error) {
	if err := k.update(ctx, tier, func(st TierState) TierState { return Disable(st) }); err != nil {
		return nil, err
	}
	k.log.Info("tier disabled", "tier", tier)
	if !cancel {
		return nil, nil
	}
	tc := k.cfg.Tiers[tier]
	jobs, err := k.sched.JobsByName(ctx, tc.JobName)
	if err == nil && tc.Replicas.Max > 0 {
		var extras []slurm.JobRef
		extras, err = k.sched.JobsByName(ctx, tc.Replicas.ExtraJobName)
		jobs = append(jobs, extras...)
	}
	if err != nil {
		return nil, fmt.Errorf("disable tier %s: disabled, but its jobs are not cancelled: %w", tier, err)
	}
	var cancelled []string
	var errs []error
	for _, j := range jobs {
		if err := k.sched.Cancel(ctx, j.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		k.log.Info("job cancelled", "tier", tier, "job_id", j.ID, "state", j.State)
		cancelled = append(cancelled, j.ID)
	}
	if err := errors.Join(errs...); err != nil {
		return cancelled, fmt.Errorf("disable tier %s: disabled, but not every job is cancelled: %w", tier, err)
	}
	return cancelled, nil
}

// update applies change to tier's state under the lock.
func (k *Keeper) update(ctx context.Context, tier string, change func(TierState) TierState) error {
	if _, err := k.cfg.Tier(tier); err != nil {
		return err
	}
	unlock, err := k.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := k.store.Load(tier)
	if err != nil {
		return err
	}
	return k.store.Save(tier, change(st))
}
