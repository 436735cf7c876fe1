package keeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/tomlconf"
	"slurm-llm/slurm"
)

// Slurm holds a requeued job PENDING (BeginTime) for about 120 s although
// other nodes may be idle (slurm/FACTS.md R2): a tier preempted from one
// node could run on another at once. The release check lifts that hold as
// soon as it is safe: the job is PENDING (a release while it is still
// COMPLETING is silently undone) and the current second is later than its
// SubmitTime, which the requeue rewrote to the second it finished (a
// release allocated in the requeue's second kills the job for good: "Job
// credential revoked"). It never touches a held job, a disabled tier's job,
// or a job that is not the tier's; a scheduler that does not answer means
// "do nothing". The policy is PlanReleases, a pure function; Keeper.Release
// asks squeue once and carries it out.

// ReleaseVerdict is what the release check does about one job.
type ReleaseVerdict string

// The verdicts of PlanReleases.
const (
	// VerdictRelease: lift the requeue's hold now (scontrol update JobId=J
	// StartTime=now).
	VerdictRelease ReleaseVerdict = "release"
	// VerdictWait: a requeued job that will be released at Until, when it
	// is safe.
	VerdictWait ReleaseVerdict = "wait"
	// VerdictLeave: not released, and no release is planned (Reason says
	// why).
	VerdictLeave ReleaseVerdict = "leave"
)

// ReleaseDecision is PlanReleases' answer about one job (or, with Job
// empty, about the whole check: the scheduler did not answer).
type ReleaseDecision struct {
	Tier    string
	Job     string
	Verdict ReleaseVerdict
	// Reason says why, for the log line.
	Reason string
	// Until is when a VerdictWait job becomes safe to release.
	Until time.Time
	// Routine marks a decision about a job with nothing to release (running,
	// pending for resources): logged at debug level only.
	Routine bool
	// Failed marks a release that scontrol refused or that got no answer.
	Failed bool
}

// ReleasePolicy is the part of the config the release check follows.
type ReleasePolicy struct {
	// Delay is how long after the requeue (its SubmitTime, whole seconds)
	// a job is released; at least one second (FACTS R2).
	Delay time.Duration
	// RequeueHoldMax is the longest EligibleTime − SubmitTime that is
	// Slurm's own hold after a requeue (121 s); a begin time further out
	// was set by someone and is left alone.
	RequeueHoldMax time.Duration
}

// PlanReleases decides, for each job squeue listed under the tiers' names,
// whether to release it now, later or never. owner is the uid the tier
// jobs belong to (the keeper's own: sbatch submits as the caller); states
// are the tiers' saved states, stateErrs the tiers whose state could not
// be read. A scheduler error gives one decision, "leave", with no job. It
// is pure.
func PlanReleases(cfg Config, p ReleasePolicy, states map[string]TierState, stateErrs map[string]error,
	jobs []slurm.QueuedJob, schedErr error, owner uint32, now time.Time) []ReleaseDecision {
	if schedErr != nil {
		return []ReleaseDecision{{Verdict: VerdictLeave, Reason: "scheduler did not answer: " + schedErr.Error()}}
	}
	byName := map[string]TierConfig{}
	for _, tc := range cfg.Tiers {
		byName[tc.JobName] = tc
	}
	out := make([]ReleaseDecision, 0, len(jobs))
	for _, j := range jobs {
		tc, ok := byName[j.Name]
		if !ok {
			out = append(out, ReleaseDecision{Job: j.ID, Verdict: VerdictLeave, Reason: fmt.Sprintf("not a tier's job (named %q)", j.Name)})
			continue
		}
		d := decideRelease(tc, p, states[tc.Name], stateErrs[tc.Name], j, owner, now)
		d.Tier, d.Job = tc.Name, j.ID
		out = append(out, d)
	}
	return out
}

// decideRelease is the verdict on one job of tier tc.
func decideRelease(tc TierConfig, p ReleasePolicy, st TierState, stErr error, j slurm.QueuedJob, owner uint32, now time.Time) ReleaseDecision {
	leave := func(format string, args ...any) ReleaseDecision {
		return ReleaseDecision{Verdict: VerdictLeave, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case j.UID != owner:
		return leave("not the tier's job: owned by uid %d, the tier's jobs by uid %d", j.UID, owner)
	case stErr != nil:
		return leave("tier state unreadable, tier left alone: %v", stErr)
	case !st.IsEnabled(tc):
		return leave("tier disabled (by %s)", st.EnabledBy())
	case !tc.Release:
		return leave("release = false for this tier")
	case j.State == slurm.JobCompleting:
		return leave("completing (a requeue in progress): a release now would be undone; wait for PENDING")
	case j.State != slurm.JobPending:
		return ReleaseDecision{Verdict: VerdictLeave, Reason: "job " + string(j.State), Routine: true}
	case j.Held():
		return leave("held (reason %s, priority %d): left to whoever holds it", j.Reason, j.Priority)
	case j.Reason != "BeginTime":
		return ReleaseDecision{Verdict: VerdictLeave, Reason: "pending (" + j.Reason + "): no begin time to lift", Routine: true}
	case j.Restarts == 0:
		return leave("begin time set at submission, not by a requeue: left alone")
	case j.Submit.IsZero() || j.Eligible.IsZero():
		return leave("submit or eligible time unknown: cannot tell when it is safe")
	case j.Eligible.Sub(j.Submit) > p.RequeueHoldMax:
		return leave("begin time %s is %s after the requeue, beyond Slurm's own hold (%s): someone set it; left alone",
			stamp(j.Eligible), j.Eligible.Sub(j.Submit), p.RequeueHoldMax)
	}
	safe := j.Submit.Add(p.Delay)
	if now.Before(safe) {
		return ReleaseDecision{Verdict: VerdictWait, Until: safe,
			Reason: fmt.Sprintf("requeued at %s: released from %s (the requeue's second kills the job)", stamp(j.Submit), stamp(safe))}
	}
	return ReleaseDecision{Verdict: VerdictRelease,
		Reason: fmt.Sprintf("requeued at %s, held until %s by Slurm: releasing now", stamp(j.Submit), stamp(j.Eligible))}
}

// ReleaseResult is what one release check saw and did.
type ReleaseResult struct {
	Decisions []ReleaseDecision
	// Released are the jobs released (scontrol update succeeded).
	Released []string
	// Next is when the check should run again: the earliest Until of a
	// waiting job, if sooner than the interval.
	Next time.Time
	// ListErr is the listing's error: squeue did not answer, nothing was
	// released.
	ListErr error
	// Err joins ListErr and the releases that failed.
	Err error
}

// Release runs one release check: one squeue call for the jobs of every
// tier (the keeper account's only, always: squeue -u), the tiers'
// states read without the lock (the check writes nothing), PlanReleases,
// then a release of each job it says to release.
func (k *Keeper) Release(ctx context.Context) ReleaseResult {
	now := k.now()
	names := make([]string, 0, len(k.cfg.Tiers))
	states, stateErrs := map[string]TierState{}, map[string]error{}
	for _, name := range k.cfg.TierNames() {
		tc := k.cfg.Tiers[name]
		names = append(names, tc.JobName)
		st, err := k.store.Load(name)
		if err != nil {
			stateErrs[name] = err
		}
		states[name] = st
	}
	jobs, err := k.sched.Queue(ctx, slurm.QueueQuery{Names: names, User: k.account()})
	res := ReleaseResult{ListErr: err, Err: err, Next: now.Add(k.cfg.ReleaseInterval)}
	if err == nil {
		k.metrics.listedKept(k.cfg, jobs, now)
	}
	res.Decisions = PlanReleases(k.cfg, k.cfg.ReleasePolicy(), states, stateErrs, jobs, err, k.owner, now)
	for i, d := range res.Decisions {
		switch d.Verdict {
		case VerdictWait:
			if d.Until.Before(res.Next) {
				res.Next = d.Until
			}
		case VerdictRelease:
			if rerr := k.sched.ReleaseNow(ctx, d.Job); rerr != nil {
				res.Decisions[i].Verdict, res.Decisions[i].Failed = VerdictLeave, true
				res.Decisions[i].Reason = "release failed, tried again at the next check: " + rerr.Error()
				res.Err = errors.Join(res.Err, rerr)
				continue
			}
			k.metrics.releasedJob(d.Tier)
			res.Released = append(res.Released, d.Job)
		}
	}
	return res
}

// releaseLog writes one line per release decision, and only when a job's
// decision changes (a job waiting for its safe second, or one an admin
// holds, is checked every second but logged once). One goroutine owns it.
type releaseLog struct {
	log  hclog.Logger
	last map[string]string // job ("" for the check itself) → verdict and reason last logged
}

// record logs the decisions of one check that are new.
func (l *releaseLog) record(res ReleaseResult) {
	seen := make(map[string]string, len(res.Decisions))
	for _, d := range res.Decisions {
		key := string(d.Verdict) + ": " + d.Reason
		seen[d.Job] = key
		if l.last[d.Job] == key && d.Verdict != VerdictRelease {
			continue
		}
		args := []any{"tier", d.Tier, "job_id", d.Job, "reason", d.Reason}
		switch {
		case d.Verdict == VerdictRelease:
			l.log.Info("released requeued job", args...)
		case d.Job == "":
			l.log.Warn("release check: nothing released", "reason", d.Reason)
		case d.Failed:
			l.log.Warn("requeued job not released", args...)
		case d.Verdict == VerdictWait:
			l.log.Info("requeued job not released yet", append(args, "until", stamp(d.Until))...)
		case d.Routine:
			l.log.Debug("nothing to release", args...)
		default:
			l.log.Info("requeued job not released", args...)
		}
	}
	if _, down := l.last[""]; down && res.ListErr == nil {
		l.log.Info("release check: scheduler answers again")
	}
	l.last = seen
}

// LogRelease logs one check's decisions, as the loop does (keep --once).
func LogRelease(log hclog.Logger, res ReleaseResult) {
	(&releaseLog{log: log}).record(res)
}

// CheckRequeueHold compares requeue_hold_max with the hold Slurm puts on
// a job it requeues, read from the controller (`scontrol show config`:
// EligibleTime − SubmitTime is D + 1 s, D being cred_expire, or
// requeue_delay on 25.11; slurm.Config.RequeueDelay). A requeue_hold_max
// below that takes every requeued tier job for one deferred by someone,
// and the job waits the whole hold: problem says so and what to set. It
// is nil when no tier releases. err is a scheduler failure: nothing is
// known then.
func (k *Keeper) CheckRequeueHold(ctx context.Context) (problem, err error) {
	releases := false
	for _, tc := range k.cfg.Tiers {
		releases = releases || tc.Release
	}
	if !releases || k.cfg.ReleaseInterval <= 0 {
		return nil, nil
	}
	c, err := k.sched.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("check requeue_hold_max against Slurm's requeue hold: %w", err)
	}
	return requeueHoldProblem(k.cfg.Path, k.cfg.RequeueHoldMax, c), nil
}

// requeueHoldProblem is CheckRequeueHold's verdict: nil when holdMax
// covers the hold Slurm sets with c.
func requeueHoldProblem(file string, holdMax time.Duration, c slurm.Config) error {
	hold := c.RequeueDelay() + time.Second
	if holdMax >= hold {
		return nil
	}
	source := "AuthInfo unset"
	if c.AuthInfo != "" {
		source = fmt.Sprintf("AuthInfo %q", c.AuthInfo)
	}
	if c.SchedulerParameters != "" {
		source += fmt.Sprintf(", SchedulerParameters %q", c.SchedulerParameters)
	}
	return &tomlconf.Problem{File: file, Key: "requeue_hold_max", Reason: fmt.Sprintf(
		"%s is shorter than the %s Slurm %s holds a requeued job (%s): every requeued tier job would be left alone "+
			"as deferred by someone and wait the whole hold; set requeue_hold_max = %q",
		holdMax, hold, c.Version, source, hold.String())}
}
