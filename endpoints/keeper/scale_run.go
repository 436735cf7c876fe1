package keeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

// slurmQueueAll lists every user's jobs in squeue's default states
// (pending, running, completing…).
var slurmQueueAll = slurm.QueueQuery{}

// ScaleResult is what one scale check did about one tier.
type ScaleResult struct {
	Tier     string
	Decision ScaleDecision
	// Why is GrowCheck's refusal after a ScaleTest ("" when it grew or did
	// not test).
	Why       string
	Submitted string
	Cancelled []string
	Err       error
}

// scaledTiers are the tiers with a replicas table, in name order.
func (k *Keeper) scaledTiers() []TierConfig {
	var out []TierConfig
	for _, name := range k.cfg.TierNames() {
		if tc := k.cfg.Tiers[name]; tc.Replicas.Max > 0 {
			out = append(out, tc)
		}
	}
	return out
}

// gatherScale lists every job (one squeue call), the partitions (one
// scontrol call) and the valid endpoint files of the keeper's owner.
func (k *Keeper) gatherScale(ctx context.Context) ScaleFacts {
	var f ScaleFacts
	if f.Jobs, f.Err = k.sched.Queue(ctx, slurmQueueAll); f.Err != nil {
		k.metrics.schedulerError()
		return f
	}
	if f.Partitions, f.Err = k.sched.Partitions(ctx); f.Err != nil {
		k.metrics.schedulerError()
		return f
	}
	scan, err := endpoints.ReadDir(k.cfg.EndpointDir, endpoints.ReadOptions{AllowedUIDs: []uint32{k.owner}})
	if err != nil {
		f.Err = err
		return f
	}
	now := k.now()
	for _, e := range scan.Entries {
		if now.Before(e.Endpoint.LeaseExpires) {
			f.Endpoints = append(f.Endpoints, e.Endpoint)
		}
	}
	return f
}

// Scale runs one scale check over the tiers with replicas, under the state
// directory's lock: it grows a tier by one extra replica when DecideScale
// and GrowCheck agree, and cancels the extras DecideScale names.
func (k *Keeper) Scale(ctx context.Context) ([]ScaleResult, error) {
	tiers := k.scaledTiers()
	if len(tiers) == 0 {
		return nil, nil
	}
	unlock, err := k.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	facts := k.gatherScale(ctx)
	var results []ScaleResult
	var errs []error
	for _, tc := range tiers {
		res := k.scaleTier(ctx, tc, facts)
		results = append(results, res)
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("tier %s: %w", tc.Name, res.Err))
		}
	}
	return results, errors.Join(errs...)
}

// scaleTier decides and acts for one tier and saves its state.
func (k *Keeper) scaleTier(ctx context.Context, tc TierConfig, facts ScaleFacts) ScaleResult {
	log := k.log.With("tier", tc.Name)
	res := ScaleResult{Tier: tc.Name}
	st, err := k.store.Load(tc.Name)
	if err != nil {
		res.Err = err
		return res
	}
	now := k.now()
	d := DecideScale(tc, st, k.owner, facts, now)
	res.Decision = d
	st.DemandSince = d.DemandSince
	switch d.Action {
	case ScaleUnknown:
		res.Err = facts.Err
	case ScaleCancel:
		for _, id := range d.Cancel {
			if err := k.sched.Cancel(ctx, id); err != nil {
				k.metrics.schedulerError()
				res.Err = errors.Join(res.Err, err)
				continue
			}
			res.Cancelled = append(res.Cancelled, id)
		}
		log.Info("extra replicas cancelled", "cancelled", res.Cancelled, "reason", d.Reason, "error", res.Err)
	case ScaleTest:
		st, res = k.grow(ctx, log, tc, st, facts, res, now)
	}
	if facts.Err == nil {
		k.metrics.scaled(tc.Name, facts.Replicas(tc, k.owner), res)
	}
	st.Scale = string(d.Action) + ": " + d.Reason
	if res.Why != "" {
		st.Scale = "not growing: " + res.Why
	}
	if err := k.store.Save(tc.Name, st); err != nil {
		res.Err = errors.Join(res.Err, err)
	}
	return res
}

// grow asks Slurm where an extra replica would start and submits it when
// GrowCheck allows.
func (k *Keeper) grow(ctx context.Context, log hclog.Logger, tc TierConfig, st TierState, facts ScaleFacts, res ScaleResult, now time.Time) (TierState, ScaleResult) {
	rep := EffectiveReplicas(tc, st)
	args := ExtraSbatchArgs(tc, rep)
	est, err := k.sched.TestSubmit(ctx, tc.Script, args...)
	if err != nil {
		k.metrics.schedulerError()
		res.Err = err
		res.Why = "sbatch --test-only: " + err.Error()
		return st, res
	}
	if why := GrowCheck(tc, k.owner, est, facts, now); why != "" {
		res.Why = why
		log.Debug("demand, but not growing", "reason", why)
		return st, res
	}
	id, err := k.sched.Submit(ctx, tc.Script, args...)
	st.ExtraSubmits = append(recentSubmits(st.ExtraSubmits, now), now)
	if err != nil {
		k.metrics.schedulerError()
		res.Err = err
		st = RecordError(st, err, now)
		log.Error("extra replica not submitted", "error", err)
		return st, res
	}
	res.Submitted = id
	st.DemandSince = time.Time{} // the next one needs demand of its own
	log.Info("extra replica submitted", "job_id", id, "nodes", strings.Join(est.Nodes, ","), "partition", est.Partition,
		"reason", res.Decision.Reason)
	return st, res
}

// ExtraSbatchArgs are the sbatch options of an extra replica: its job
// name, the tier's sbatch_args and extra_sbatch_args, then --no-requeue
// (an extra replica preempted is simply gone; last, so it wins over the
// script's #SBATCH --requeue) and the idle exit for its supervisor.
func ExtraSbatchArgs(tc TierConfig, rep Replicas) []string {
	args := []string{"--job-name=" + rep.ExtraJobName}
	args = append(args, tc.SbatchArgs...)
	args = append(args, rep.ExtraSbatchArgs...)
	return append(args, "--no-requeue", "--export=ALL,"+endpoints.IdleExitEnv+"="+strconv.FormatInt(int64(rep.IdleAfter/time.Second), 10)+"s")
}

// ScaleTier is `tier scale NAME --min N --max M`: the admin's min and max
// persist in the tier's state and win over the config until set again
// (a negative value leaves that bound as it is).
func (k *Keeper) ScaleTier(ctx context.Context, tier string, minN, maxN int) error {
	tc, err := k.cfg.Tier(tier)
	if err != nil {
		return err
	}
	if tc.Replicas.Max == 0 {
		return fmt.Errorf("tier %s has no [tiers.%s.replicas] in %s", tier, tier, k.cfg.Path)
	}
	var bad error
	err = k.update(ctx, tier, func(st TierState) TierState {
		next := st
		if minN >= 0 {
			next.ScaleMin = &minN
		}
		if maxN >= 0 {
			next.ScaleMax = &maxN
		}
		r := EffectiveReplicas(tc, next)
		switch {
		case r.Min < 1 || r.Min > MaxMembers:
			bad = fmt.Errorf("tier %s: min %d: want 1 to %d", tier, r.Min, MaxMembers)
		case r.Max < r.Min || r.Max > MaxMembers:
			bad = fmt.Errorf("tier %s: max %d: want min (%d) to %d", tier, r.Max, r.Min, MaxMembers)
		default:
			return next
		}
		return st
	})
	if err != nil {
		return err
	}
	return bad
}

// effectiveTier is tc with an admin's `tier scale` min as its members.
func effectiveTier(tc TierConfig, st TierState) TierConfig {
	if tc.Replicas.Max > 0 {
		tc.Replicas = EffectiveReplicas(tc, st)
		tc.Members = tc.Replicas.Min
	}
	return tc
}
