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
	"slurm-llm/endpoints/tomlconf"
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
		return f
	}
	if f.Partitions, f.Err = k.sched.Partitions(ctx); f.Err != nil {
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
// name, the tier's sbatch_args and extra_sbatch_args, then --requeue and
// the idle exit for its supervisor. An extra replica preempted is gone for
// good, yet it is requeueable: its supervisor then requeues it after the
// drain, and Slurm gives the preemptor the node in the same millisecond,
// where a job that ends instead (--no-requeue) holds it ~1.6 s longer
// (measured, slurm/FACTS.md R11); DecideScale cancels the requeued job
// before it can run again. Last, so it wins over the script's #SBATCH lines.
func ExtraSbatchArgs(tc TierConfig, rep Replicas) []string {
	args := []string{"--job-name=" + rep.ExtraJobName}
	args = append(args, tc.SbatchArgs...)
	args = append(args, rep.ExtraSbatchArgs...)
	return append(args, "--requeue", "--export=ALL,"+endpoints.IdleExitEnv+"="+strconv.FormatInt(int64(rep.IdleAfter/time.Second), 10)+"s")
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
	if maxN > 0 {
		// A max over the partition is refused; a scheduler that does not
		// answer does not stop an admin (the scale check never grows past
		// what Slurm can start anyway).
		rep := tc.Replicas
		rep.Max = maxN
		parts, err := k.sched.Partitions(ctx)
		var problem error
		if err == nil {
			problem, err = k.room(ctx, tc, rep, true, parts)
		}
		if problem != nil {
			return problem
		}
		if err != nil {
			k.log.Warn("max not checked against the partition", "tier", tier, "error", err)
		}
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

// CheckRoom checks each growing tier's max against its partition, which
// only Slurm knows: sbatch --test-only of an extra says the partition and
// how many nodes one replica takes, scontrol the partition's nodes. max
// replicas needing more nodes than the partition has is a config error
// naming the file, line and key (or `tier scale`, when an admin set it);
// problems lists them. err is a scheduler failure: nothing is known then,
// and the caller goes on (growth stops at "not now" anyway).
func (k *Keeper) CheckRoom(ctx context.Context) (problems []error, err error) {
	tiers := k.scaledTiers()
	if len(tiers) == 0 {
		return nil, nil
	}
	parts, err := k.sched.Partitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("check max against the partition: %w", err)
	}
	var errs []error
	for _, tc := range tiers {
		st, lerr := k.store.Load(tc.Name)
		if lerr != nil {
			errs = append(errs, lerr)
			continue
		}
		rep := EffectiveReplicas(tc, st)
		if !rep.Grows() {
			continue
		}
		p, terr := k.room(ctx, tc, rep, st.ScaleMax != nil, parts)
		if terr != nil {
			errs = append(errs, terr)
		}
		if p != nil {
			problems = append(problems, p)
		}
	}
	return problems, errors.Join(errs...)
}

// room asks sbatch --test-only where an extra replica of tc would go and
// gives roomProblem's verdict on rep's max.
func (k *Keeper) room(ctx context.Context, tc TierConfig, rep Replicas, byAdmin bool, parts map[string]slurm.Partition) (problem, err error) {
	est, err := k.sched.TestSubmit(ctx, tc.Script, ExtraSbatchArgs(tc, rep)...)
	if err != nil {
		return nil, fmt.Errorf("tier %s: check max against the partition: sbatch --test-only: %w", tc.Name, err)
	}
	return roomProblem(k.cfg.Path, tc, rep, byAdmin, est, parts), nil
}

// roomProblem is CheckRoom's verdict on one tier: nil when max replicas of
// est's size fit in its partition (or the partition is not listed).
func roomProblem(file string, tc TierConfig, rep Replicas, byAdmin bool, est slurm.StartEstimate, parts map[string]slurm.Partition) error {
	p, ok := parts[est.Partition]
	if !ok || len(p.Nodes) == 0 {
		return nil
	}
	per := max(len(est.Nodes), 1)
	if rep.Max*per <= len(p.Nodes) {
		return nil
	}
	reason := fmt.Sprintf("%d replicas of %d node(s) each, but partition %s (where sbatch --test-only puts them) has %d nodes: want at most %d",
		rep.Max, per, p.Name, len(p.Nodes), len(p.Nodes)/per)
	if byAdmin {
		return fmt.Errorf("tier %s: max %d set by `tier scale`: %s", tc.Name, rep.Max, reason)
	}
	return &tomlconf.Problem{File: file, Line: rep.MaxLine, Key: "tiers." + tc.Name + ".replicas.max", Reason: reason}
}
