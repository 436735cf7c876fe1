// Package keeper keeps each enabled tier queued on the controller: every
// pass it lists the tier's jobs by name, and when there is none it submits
// the tier's sbatch script, with backoff and an hourly cap so that a broken
// tier is not resubmitted in a loop. More than one job is trimmed to one;
// a scheduler that does not answer means "unknown", never "no job". An
// admin disables a tier (never resubmitted) or enables it (backoff
// cleared). Between passes a release check lifts Slurm's ~120 s hold on a
// tier's requeued job as soon as that is safe (release.go). Decide,
// Observe and PlanReleases hold the policy as pure functions; Keeper
// gathers the facts, carries the decisions out and keeps the state files.
//
// It runs on the controller only (llm-upstreams keep, tier); it never
// touches nginx (endpoints/nginx does) or a running job's processes.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
)

// Scheduler is the part of Slurm the keeper uses; *slurm.Client implements
// it. Errors wrapping slurm.ErrUnavailable mean Slurm did not answer.
type Scheduler interface {
	// JobsByName lists the pending and running jobs named name.
	JobsByName(ctx context.Context, name string) ([]slurm.JobRef, error)
	// Submit runs sbatch on script with sbatchArgs and returns the job id.
	Submit(ctx context.Context, script string, sbatchArgs ...string) (string, error)
	// Cancel scancels a job; an unknown job counts as cancelled.
	Cancel(ctx context.Context, id string) error
	// Queue lists jobs with their reasons and times (the release check).
	Queue(ctx context.Context, q slurm.QueueQuery) ([]slurm.QueuedJob, error)
	// ReleaseNow makes a pending job eligible at once.
	ReleaseNow(ctx context.Context, id string) error
	// TestSubmit says when and where a job would start (sbatch --test-only).
	TestSubmit(ctx context.Context, script string, sbatchArgs ...string) (slurm.StartEstimate, error)
	// Partitions lists the partitions with their nodes and PriorityTier.
	Partitions(ctx context.Context) (map[string]slurm.Partition, error)
	// Config is the controller's configuration (scontrol show config).
	Config(ctx context.Context) (slurm.Config, error)
}

// Options are what a Keeper uses besides its config. The zero value talks
// to the real Slurm, logs nothing and reads the real clock.
type Options struct {
	// Scheduler nil means &slurm.Client{Timeout: cfg.SchedulerTimeout, User: submit_as or this process's uid}:
	// only the submitting account's jobs count as a tier's jobs.
	Scheduler Scheduler
	// Log nil means no logging.
	Log hclog.Logger
	// Now nil means time.Now.
	Now func() time.Time
	// Owner is the uid the tiers' jobs belong to; nil means this process's
	// (sbatch submits as its caller, and keep runs as submit_as).
	Owner *uint32
}

// Keeper runs passes over the configured tiers and the admin commands on
// them. Build it with New; it holds no state between calls but its files.
type Keeper struct {
	cfg   Config
	sched Scheduler
	log   hclog.Logger
	now   func() time.Time
	store *Store
	owner uint32
	// metrics count what passes, release and scale checks saw and did.
	metrics *Metrics
}

// New returns a Keeper for cfg (as Load returns it).
func New(cfg Config, opts Options) *Keeper {
	k := &Keeper{cfg: cfg, sched: opts.Scheduler, log: opts.Log, now: opts.Now, store: NewStore(cfg.StateDir), metrics: newMetrics()}
	k.owner = uint32(os.Getuid())
	if opts.Owner != nil {
		k.owner = *opts.Owner
	}
	if k.sched == nil {
		k.sched = &slurm.Client{Timeout: cfg.SchedulerTimeout, User: k.account()}
	}
	k.sched = countingScheduler{Scheduler: k.sched, m: k.metrics}
	if k.log == nil {
		k.log = hclog.NewNullLogger()
	}
	if k.now == nil {
		k.now = time.Now
	}
	return k
}

// account is the account whose jobs are the tiers' jobs, as squeue -u
// takes it: submit_as, or, when it is empty, the account keep runs as
// (sbatch submits as its caller). It is never empty: without -u, squeue
// lists every user's jobs, and another user's job named llm-fast would
// pass for the tier's (never submitted, or the real one cancelled as a
// duplicate).
func (k *Keeper) account() string {
	if k.cfg.SubmitAs != "" {
		return k.cfg.SubmitAs
	}
	return strconv.FormatUint(uint64(k.owner), 10)
}

// Store is where the keeper keeps its state files.
func (k *Keeper) Store() *Store { return k.store }

// TierResult is what one pass did about one tier.
type TierResult struct {
	// Tier names the tier.
	Tier string
	// Decision is what Decide chose.
	Decision Decision
	// Submitted is the id of the job submitted, if any.
	Submitted string
	// Err is the tier's failure: state unreadable, scheduler unavailable,
	// sbatch or scancel failed, state not saved. nil when all went well.
	Err error
}

// Pass runs one pass over every tier, in name order, holding the state
// directory's lock. One tier's failure is logged and reported in its
// result; the other tiers go on. The error joins the tiers' failures.
func (k *Keeper) Pass(ctx context.Context) ([]TierResult, error) {
	unlock, err := k.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var results []TierResult
	var errs []error
	for _, name := range k.cfg.TierNames() {
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("pass stopped before tier %s: %w", name, ctx.Err()))
			break
		}
		res := k.passTier(ctx, k.cfg.Tiers[name])
		results = append(results, res)
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("tier %s: %w", name, res.Err))
		}
	}
	return results, errors.Join(errs...)
}

// lock takes the state directory's lock, waiting at most lock_timeout.
func (k *Keeper) lock(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.LockTimeout)
	defer cancel()
	return k.store.Lock(ctx)
}

// passTier gathers one tier's facts, decides, acts and saves its state.
func (k *Keeper) passTier(ctx context.Context, tc TierConfig) TierResult {
	log := k.log.With("tier", tc.Name)
	st, err := k.store.Load(tc.Name)
	if err != nil {
		log.Error("state unreadable, tier left alone", "error", err)
		return TierResult{Tier: tc.Name, Err: err}
	}
	tc = effectiveTier(tc, st)
	now := k.now()
	jobs, listErr := k.sched.JobsByName(ctx, tc.JobName)
	if listErr == nil {
		before := st.Unhealthy
		k.metrics.listedTier(tc.Name, jobs, now)
		st = Observe(tc, st, jobs, now)
		if before > 0 && st.Unhealthy == 0 {
			log.Info("job ran long enough, backoff reset", "job_id", st.JobID, "healthy_reset", tc.HealthyReset)
		}
	} else {
		st = RecordError(st, listErr, now)
	}
	d := Decide(tc, st, jobs, listErr, now)
	res := TierResult{Tier: tc.Name, Decision: d, Err: listErr}
	st, res = k.act(ctx, log, tc, st, res, now)
	if err := k.store.Save(tc.Name, st); err != nil {
		log.Error("state not saved", "error", err)
		res.Err = errors.Join(res.Err, err)
	}
	return res
}

// act carries out res.Decision and returns the state after it.
func (k *Keeper) act(ctx context.Context, log hclog.Logger, tc TierConfig, st TierState, res TierResult, now time.Time) (TierState, TierResult) {
	d := res.Decision
	switch d.Action {
	case ActionUnknown:
		log.Warn("scheduler did not answer, nothing done", "error", res.Err)
	case ActionNothing:
		log.Debug("nothing to do", "reason", d.Reason)
	case ActionWait:
		log.Info("no job, waiting", "until", d.Until.UTC().Format(time.RFC3339), "left", d.Wait, "reason", d.Reason)
	case ActionSubmit:
		st, res = k.submit(ctx, log, tc, st, res, now)
	case ActionCancelExtras:
		log.Warn("too many jobs, cancelling extras", "keep", d.Keep, "cancel", d.Cancel, "reason", d.Reason)
		cancelled := 0
		for _, id := range d.Cancel {
			if err := k.sched.Cancel(ctx, id); err != nil {
				log.Error("cancel extra job", "job_id", id, "error", err)
				st = RecordError(st, err, now)
				res.Err = errors.Join(res.Err, err)
				continue
			}
			cancelled++
		}
		k.metrics.did(tc.Name, 0, cancelled)
	}
	return st, res
}

// submit sbatches the tier's script under its job name, Decision.Count
// times (an elastic tier's missing members), and records the attempt. The
// pass counts as one unhealthy submit for the backoff, and each job
// against the hourly cap (max_submits_per_hour per member). It stops at
// the first sbatch that fails.
func (k *Keeper) submit(ctx context.Context, log hclog.Logger, tc TierConfig, st TierState, res TierResult, now time.Time) (TierState, TierResult) {
	args := append([]string{"--job-name=" + tc.JobName}, tc.SbatchArgs...)
	var ids []string
	var err error
	for range max(res.Decision.Count, 1) {
		var id string
		if id, err = k.sched.Submit(ctx, tc.Script, args...); err != nil {
			break
		}
		ids = append(ids, id)
	}
	st = RecordSubmits(st, ids, err, now)
	k.metrics.did(tc.Name, len(ids), 0)
	if err != nil {
		log.Error("submit failed", "script", tc.Script, "submitted", ids, "unhealthy_submits", st.Unhealthy,
			"next_backoff", Backoff(tc, st.Unhealthy), "error", err)
		res.Err = errors.Join(res.Err, err)
	}
	if len(ids) > 0 {
		log.Info("submitted", "job_id", strings.Join(ids, ","), "script", tc.Script, "unhealthy_submits", st.Unhealthy, "reason", res.Decision.Reason)
		res.Submitted = strings.Join(ids, ",")
	}
	return st, res
}

// RunOptions say how Run loops.
type RunOptions struct {
	// Interval is the wait between the end of a pass and the next; it
	// must be positive.
	Interval time.Duration
	// Notify, if set, is told how the loop does, in sd_notify's words:
	// "READY=1" after the first pass, "WATCHDOG=1" every WatchdogInterval
	// from the loop itself (a pass that hangs stops the pings, so the
	// service manager restarts the process), "STOPPING=1" when ctx ends.
	Notify func(state string)
	// WatchdogInterval is how often the loop pings Notify; 0 means never.
	WatchdogInterval time.Duration
}

// notify tells o.Notify, if set.
func (o RunOptions) notify(state string) {
	if o.Notify != nil {
		o.Notify(state)
	}
}

// Run runs a pass at once and then every opts.Interval (counted from the
// end of the previous pass) until ctx ends, then returns nil. A failed
// pass is logged and the loop goes on. Between passes, when the config has
// a release_interval, it runs the release check (Release) every
// release_interval, sooner when a requeued job becomes safe to release,
// and less often (doubling, at most 30 s) while squeue fails.
func (k *Keeper) Run(ctx context.Context, opts RunOptions) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	rl := &releaseLoop{log: releaseLog{log: k.log.Named("release")}}
	releaseC, stopRelease := rl.start(k.cfg.ReleaseInterval)
	defer stopRelease()
	var scaleC <-chan time.Time
	if len(k.scaledTiers()) > 0 {
		t := time.NewTicker(k.cfg.ScaleInterval)
		defer t.Stop()
		scaleC = t.C
	}
	var ping <-chan time.Time
	if opts.Notify != nil && opts.WatchdogInterval > 0 {
		t := time.NewTicker(opts.WatchdogInterval)
		defer t.Stop()
		ping = t.C
	}
	defer opts.notify("STOPPING=1")
	ready := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping:
			opts.notify("WATCHDOG=1")
			continue
		case <-releaseC:
			rl.check(ctx, k)
			continue
		case <-scaleC:
			k.scaleOnce(ctx)
			continue
		case <-timer.C:
		}
		if ctx.Err() != nil {
			return nil // both were ready and select chose the timer
		}
		if _, err := k.Pass(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("pass had failures", "error", err)
		}
		if !ready {
			opts.notify("READY=1")
			ready = true
		}
		timer.Reset(opts.Interval)
	}
}

// scaleOnce runs one scale check: scaleTier logs what it submits or
// cancels, this a check that failed (Warn) and why a tier with demand did
// not grow (Debug, every check).
func (k *Keeper) scaleOnce(ctx context.Context) {
	results, err := k.Scale(ctx)
	if err != nil && ctx.Err() == nil {
		k.log.Named("scale").Warn("scale check had failures: nothing submitted or cancelled where it failed", "error", err)
	}
	for _, r := range results {
		if r.Why != "" {
			k.log.Named("scale").Debug("not growing", "tier", r.Tier, "reason", r.Why)
		}
	}
}

// releaseLoop is the release check's part of Run: its timer, its log and
// its backoff while the scheduler fails. Run's goroutine owns it.
type releaseLoop struct {
	log      releaseLog
	timer    *time.Timer
	failures int
}

// maxReleaseBackoff caps the wait between release checks while squeue fails.
const maxReleaseBackoff = 30 * time.Second

// start arms the first check at once; with interval 0 the channel is nil
// (never ready): no release checks.
func (l *releaseLoop) start(interval time.Duration) (<-chan time.Time, func()) {
	if interval <= 0 {
		return nil, func() {}
	}
	l.timer = time.NewTimer(0)
	return l.timer.C, func() { l.timer.Stop() }
}

// check runs one release check, logs it and arms the next.
func (l *releaseLoop) check(ctx context.Context, k *Keeper) {
	res := k.Release(ctx)
	if ctx.Err() != nil {
		return
	}
	l.log.record(res)
	wait := res.Next.Sub(k.now())
	if res.ListErr != nil {
		l.failures++
		wait = min(k.cfg.ReleaseInterval<<min(l.failures, 10), maxReleaseBackoff)
	} else {
		l.failures = 0
	}
	l.timer.Reset(max(wait, 10*time.Millisecond))
}
