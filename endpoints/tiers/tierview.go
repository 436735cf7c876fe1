package tiers

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

// A tier's view says, for people and for the 503 that clients get when the
// tier has nothing live, whether it is routed, why not, which job is the
// tier's and which job preempted it, and when it is expected back: Slurm's
// start estimate for the pending tier job (or the preemptor's end by its
// time limit) plus the tier's measured time from start to routed. Unknown
// stays unknown: no estimate gives expected_back null and the default
// Retry-After. computeView is the pure function; the updater gathers its
// inputs (tierask.go, tiermem.go).

// Tier states of a view.
const (
	// StateRouted: nginx routes the tier to its own endpoints.
	StateRouted = "routed"
	// StateBackup: the tier has nothing live; its backup tier serves it.
	StateBackup = "backup"
	// StateDown: nothing serves the tier; nginx answers 503.
	StateDown = "down"
)

// Reasons a view gives, in the 503's "reason" and in status. The words are
// part of the interface clients see: change them with care.
const (
	ReasonRouted    = "routed"
	ReasonPreempted = "preempted by a higher-priority job"
	ReasonQueued    = "queued: waiting for resources"
	ReasonStarting  = "starting: loading the model"
	ReasonDisabled  = "disabled by an admin"
	ReasonHeld      = "held by an admin"
	ReasonNotQueued = "not queued: no job for this tier"
	ReasonRequeued  = "requeued: waiting to start again"
	ReasonStopping  = "stopping: the job is ending"
	// ReasonReplanning: an elastic tier's head stops to start again on the
	// members it has (one was taken, lost, or came back).
	ReasonReplanning = "re-planning: reloading on the nodes the tier has"
	// ReasonRefused starts the reason of a tier whose job runs but whose
	// endpoint file is refused; the file and why follow.
	ReasonRefused  = "not routed: its endpoint file is refused"
	ReasonUnknown  = "unknown: the scheduler does not answer"
	ReasonNoAnswer = "no inference endpoint answered"
	// ReasonNoEndpoint: nothing live, and the scheduler is not asked.
	ReasonNoEndpoint = "no live endpoint"
)

// TierView is what status, the 503 body and the availability record say
// about one tier.
type TierView struct {
	Tier string `json:"tier"`
	// State is StateRouted, StateBackup or StateDown.
	State string `json:"state"`
	// ServedBy is the tier nginx routes to (itself, its backup, "").
	ServedBy string `json:"served_by"`
	// Reason says why the tier is not routed (ReasonRouted when it is).
	Reason string `json:"reason"`
	// Serving is what a routed tier serves with, as its live endpoint says
	// (an elastic tier: "2 of 3 nodes, context 65536"); "" for the others.
	Serving string `json:"serving,omitempty"`
	// Job is the tier's job and JobState, JobReason what Slurm says of it.
	Job       string `json:"job,omitempty"`
	JobState  string `json:"job_state,omitempty"`
	JobReason string `json:"job_reason,omitempty"`
	// Preemptor is the job that took the tier's nodes, when known.
	Preemptor *Preemptor `json:"preemptor,omitempty"`
	// ExpectedBack is when the tier should be routed again; nil is unknown.
	ExpectedBack *time.Time `json:"expected_back"`
	// RetryAfter is the seconds nginx's 503 tells clients to wait.
	RetryAfter int `json:"retry_after"`
	// Overdue is set when the tier's job should have started or been
	// routed already (its preemptor is past its time limit, its estimate
	// has passed) and no new estimate is known: back any moment.
	Overdue bool `json:"overdue,omitempty"`
	// StartToReady is the tier's median time from job start to routed over
	// its last ReadySamples starts; 0 before the first.
	StartToReady time.Duration `json:"start_to_ready_ns"`
	ReadySamples int           `json:"ready_samples"`
}

// Preemptor is the job that runs on the nodes a preempted tier held.
type Preemptor struct {
	Job       string `json:"job"`
	Name      string `json:"name"`
	Partition string `json:"partition"`
	// End is its end by its time limit; nil without a limit.
	End *time.Time `json:"end"`
}

// OutageConfig is how views estimate and say it (upstreams.toml [outage]).
type OutageConfig struct {
	// RetryAfter is the Retry-After when nothing better is known.
	RetryAfter time.Duration
	// RetryAfterMax caps Retry-After however far the estimate.
	RetryAfterMax time.Duration
	// ReadySamples is how many start-to-ready times are kept per tier.
	ReadySamples int
}

// keeperTier is what the keeper's config and state say of a tier.
type keeperTier struct {
	Known   bool // the keeper keeps this tier
	Enabled bool
	By      string // "admin" or "config"
	Release bool   // it releases requeued jobs
	// ReleaseWithin is how long after a requeue (the job's SubmitTime) the
	// keeper has released it at the latest: its release_delay plus one
	// release_interval (its check's period); 0 when unknown.
	ReleaseWithin time.Duration
	// RequeueHoldMax is the longest begin time after a requeue the keeper
	// takes for Slurm's own hold (requeue_hold_max); a job deferred further
	// is left alone. 0: not checked.
	RequeueHoldMax time.Duration
}

// viewInput is everything computeView reads.
type viewInput struct {
	Tier string
	// Own: nginx routes the tier to its own endpoints; ServedBy: what it
	// routes to (the backup's name, or "").
	Own      bool
	ServedBy string
	// Decisions are the tier's entries as the pass decided them.
	Decisions []endpoints.Decision
	// Rejected are the tier's files (by name) the scan refused unread or
	// unparsed (owner, mode, content).
	Rejected []endpoints.Rejected
	// Asked: the scheduler's queue was asked (a queue is configured);
	// QueueErr: it did not answer. Jobs are the tier's jobs it listed.
	Asked    bool
	QueueErr error
	Jobs     []slurm.QueuedJob
	// Running are running jobs (preemptor candidates) and Partitions the
	// partitions' tiers; nil when not asked.
	Running    []slurm.QueuedJob
	Partitions map[string]slurm.Partition
	Keeper     keeperTier
	Mem        tierMem
	Now        time.Time
	Cfg        OutageConfig
}

// computeView is the pure view of one tier.
func computeView(in viewInput) TierView {
	v := TierView{Tier: in.Tier, ServedBy: in.ServedBy}
	v.StartToReady, v.ReadySamples = in.Mem.medianReady(), len(in.Mem.Ready)
	job, hasJob := tierJob(in.Jobs)
	if hasJob {
		v.Job, v.JobState, v.JobReason = job.ID, string(job.State), job.Reason
	}
	switch {
	case in.Own:
		v.State, v.Reason = StateRouted, ReasonRouted
		v.RetryAfter = int(in.Cfg.RetryAfter / time.Second)
		for _, d := range in.Decisions {
			if d.Live && d.Endpoint.Serving != "" {
				v.Serving = d.Endpoint.Serving
			}
		}
		return v
	case in.ServedBy != "":
		v.State = StateBackup
	default:
		v.State = StateDown
	}
	if p := findPreemptor(in, job, hasJob); p != nil {
		v.Preemptor = p
	}
	var start *time.Time // when the tier's job starts (or started), if known
	var overdue bool     // it should have started or been routed already
	v.Reason, start, overdue = reasonAndStart(in, job, hasJob, v.Preemptor)
	if start != nil && v.StartToReady > 0 {
		eta := start.Add(v.StartToReady).Truncate(time.Second)
		if eta.Before(in.Now.Truncate(time.Second)) {
			overdue = true
		} else {
			v.ExpectedBack = &eta
		}
	}
	v.RetryAfter = retryAfter(v.ExpectedBack, in.Now, in.Cfg)
	if overdue && v.ExpectedBack == nil {
		// Expected any moment, but when exactly is unknown: come back soon.
		v.Overdue = true
		v.RetryAfter = int(min(retryBuckets[0], in.Cfg.RetryAfterMax) / time.Second)
	}
	return v
}

// reasonAndStart says why a tier with nothing live is down, and when its
// job starts or started (nil when unknown; overdue when the start it
// waits for is past), from the evidence in order of weight: the admin's
// word, the endpoint files, then the scheduler.
func reasonAndStart(in viewInput, job slurm.QueuedJob, hasJob bool, p *Preemptor) (string, *time.Time, bool) {
	if in.Keeper.Known && !in.Keeper.Enabled {
		if in.Keeper.By == "config" {
			return "disabled in the keeper's config", nil, false
		}
		return ReasonDisabled, nil, false
	}
	if why, start, ok := fromFiles(in); ok {
		return why, start, false
	}
	if why, ok := refusal(in); ok {
		return why, nil, false
	}
	if in.Asked && in.QueueErr != nil {
		return ReasonUnknown, nil, false
	}
	why, start := reasonFromSlurm(in, job, hasJob)
	if why != "" {
		return why, start, false
	}
	start, overdue := pendingStart(in, job, p)
	preempted := in.Mem.Preempted != nil && in.Mem.Preempted.Job == job.ID
	switch {
	case preempted || p != nil:
		return ReasonPreempted, start, overdue
	case job.Restarts > 0 && job.Reason == "BeginTime":
		return ReasonRequeued, start, overdue
	}
	return ReasonQueued, start, overdue
}

// reasonFromSlurm is the reason of a tier whose job is not pending (or
// absent, or held), with its start when known; "" for a pending job.
func reasonFromSlurm(in viewInput, job slurm.QueuedJob, hasJob bool) (string, *time.Time) {
	preempted := in.Mem.Preempted != nil && (!hasJob || in.Mem.Preempted.Job == job.ID)
	switch {
	case !in.Asked:
		if preempted {
			return ReasonPreempted, nil
		}
		return ReasonNoEndpoint, nil
	case !hasJob:
		return ReasonNotQueued, nil
	case job.Held():
		if job.Reason == "JobHeldAdmin" {
			return ReasonHeld, nil
		}
		return "held: " + job.Reason, nil
	case job.State == slurm.JobRunning || job.State == slurm.JobSignaling || job.State == "CONFIGURING":
		if !job.Preempt.IsZero() || stillPreempted(in.Mem, job.ID, job.Restarts) {
			// A listing from before the requeue shows the preempted run
			// still RUNNING: it is not the next run starting.
			return ReasonPreempted, nil
		}
		return ReasonStarting, timePtr(job.Start)
	case job.State == slurm.JobCompleting:
		if preempted {
			return ReasonPreempted, nil
		}
		return ReasonStopping, nil
	case job.State != slurm.JobPending:
		return "job " + string(job.State), nil
	}
	return "", nil
}

// fromFiles is the reason the tier's endpoint files give, if any: a file
// starting (its run's start is known) or draining, whose lease holds.
func fromFiles(in viewInput) (string, *time.Time, bool) {
	for _, d := range in.Decisions {
		e := d.Endpoint
		if in.Now.After(e.LeaseExpires) || d.Why == endpoints.WhySuperseded || d.Why == endpoints.WhyOldTerm {
			continue
		}
		switch e.State {
		case endpoints.StateStarting:
			return ReasonStarting, timePtr(e.StartedAt), true
		case endpoints.StateDraining:
			if e.Reason == "preempted" || (e.Reason == "shutdown" && preemptedRun(in, e.JobID, e.RestartCount)) {
				// "shutdown": the supervisor drains at its notice and
				// names the cause once Slurm told it; Slurm may already
				// have told the controller.
				return ReasonPreempted, nil, true
			}
			if strings.HasPrefix(e.Reason, "re-planning") {
				// Back after a load, counted from now: the drain is short.
				return ReasonReplanning, timePtr(in.Now), true
			}
			return ReasonStopping, nil, true
		}
	}
	return "", nil, false
}

// refusal is the reason of a tier whose endpoint file is refused: a ready
// file kept from routing by a check (the job's owner or name, the network,
// the tier not configured), or a file of the tier's name the scan refused
// (its owner, mode, content). It names the file and the rule it broke, in
// fixed words: the reason is the tier's public 503, and what a file or a
// job name says is chosen by whoever wrote it (status and the log have the
// details).
func refusal(in viewInput) (string, bool) {
	for _, d := range in.Decisions {
		if d.Endpoint.State == endpoints.StateReady && !d.Live && !in.Now.After(d.Endpoint.LeaseExpires) &&
			d.Why != endpoints.WhySuperseded && d.Why != WhyAwaitingScheduler && d.Why != endpoints.WhyOldTerm {
			return ReasonRefused + " (" + d.File + ": " + publicWhy(d.Why) + ")", true
		}
	}
	for _, r := range in.Rejected {
		return ReasonRefused + " (" + r.File + ": " + endpoints.PublicRule(r.Reason) + ")", true
	}
	return "", false
}

// publicWhy is a routing decision's why in fixed words: the scheduler's
// checks quote the job's name, which its submitter chose.
func publicWhy(why string) string {
	switch {
	case strings.HasPrefix(why, "job owned by uid"):
		return "its job belongs to another user than the file's owner"
	case strings.HasPrefix(why, "job named"):
		return "its job is not named as the tier's jobs"
	}
	return why // the updater's and liveness's own fixed words
}

// stillPreempted reports whether the memory says run restarts of job was
// preempted (and it has not been routed since).
func stillPreempted(m tierMem, job string, restarts int) bool {
	return m.Preempted != nil && m.Preempted.Job == job && restarts <= m.Preempted.Restarts
}

// preemptedRun reports whether run restarts of job is known preempted: the
// memory says so, or Slurm lists the job with its PreemptTime.
func preemptedRun(in viewInput, job string, restarts int) bool {
	if stillPreempted(in.Mem, job, restarts) {
		return true
	}
	for _, j := range in.Jobs {
		if j.ID == job && !j.Preempt.IsZero() && j.Restarts <= restarts {
			return true
		}
	}
	return false
}

// TierFileName reports whether name is the name of one of tier's endpoint
// files (<tier>-<job id>.json), for rejected files, whose content says
// nothing.
func TierFileName(tier, name string) bool {
	rest, ok := strings.CutPrefix(name, tier+"-")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, ".json")
	return ok && endpoints.CheckJobID(id) == nil
}

// noEstimate: Slurm gives a start a year or more ahead when it has no idea
// (a preemptor without a time limit, FACTS R4); treat anything this far
// out as unknown.
const noEstimate = 300 * 24 * time.Hour

// plausible reports whether an estimate t from Slurm is a real one at now:
// set, not in the past (a stale estimate), not "a year from now".
func plausible(t, now time.Time) bool {
	return !t.IsZero() && !t.Before(now.Truncate(time.Second)) && t.Sub(now) < noEstimate
}

// pendingStart is when the pending tier job is expected to start: Slurm's
// estimate, unless it is only the requeue's hold that the keeper lifts
// anyway (then the keeper's release, when a node the job fits on is
// free); else the preemptor's end by its time limit; else unknown. A
// preemptor past its time limit is overdue: Slurm enforces limits by a
// periodic check (measured 21–26 s late, slurm/FACTS.md R8), and its
// estimates then move with the clock, so none is given.
func pendingStart(in viewInput, job slurm.QueuedJob, p *Preemptor) (*time.Time, bool) {
	if p != nil && p.End != nil && p.End.Before(in.Now.Truncate(time.Second)) {
		return nil, true
	}
	if keeperReleases(in.Keeper, job) {
		if at, ok := releaseStart(in, job); ok {
			return &at, false
		}
	} else if plausible(job.Start, in.Now) {
		return timePtr(job.Start), false
	}
	if p != nil && p.End != nil && plausible(*p.End, in.Now) {
		return timePtr(*p.End), false
	}
	return nil, false
}

// keeperReleases reports whether job waits only on the requeue's hold,
// which the keeper lifts (its release check, endpoints/keeper's
// decideRelease, for a tier the view already knows enabled): a requeued
// job pending for its begin time, not deferred beyond Slurm's own hold.
func keeperReleases(k keeperTier, job slurm.QueuedJob) bool {
	if job.Reason != "BeginTime" || job.Restarts == 0 || !k.Known || !k.Release {
		return false
	}
	deferred := k.RequeueHoldMax > 0 && !job.Submit.IsZero() && !job.Eligible.IsZero() &&
		job.Eligible.Sub(job.Submit) > k.RequeueHoldMax
	return !deferred
}

// releaseStart is when a requeued job the keeper releases starts, when a
// node it fits on is free: the keeper's release at the latest (the job's
// requeue + ReleaseWithin, a stable time, not one that moves with the
// clock); Slurm starts a released job on an idle node at once (measured:
// running 2.5 s after the requeue, slurm-facts 21). Unknown (false) when
// the facts are missing or no node is free.
func releaseStart(in viewInput, job slurm.QueuedJob) (time.Time, bool) {
	if job.Submit.IsZero() || in.Keeper.ReleaseWithin <= 0 || !fitsOnFreeNodes(in, job) {
		return time.Time{}, false
	}
	return job.Submit.Add(in.Keeper.ReleaseWithin), true
}

// fitsOnFreeNodes reports whether as many nodes as the tier's job last ran
// on are free in its partition: nodes no running job holds (any job: a
// shared node counts as taken). Missing facts (the running jobs or the
// partitions not asked, the job never seen running) give false. A node
// that is down or drained with no job on it counts as free: the view does
// not ask for node states (its estimate then passes, and the view says
// overdue).
func fitsOnFreeNodes(in viewInput, job slurm.QueuedJob) bool {
	m := in.Mem
	if in.Running == nil || m.Nodes == "" || m.NodesJob != job.ID {
		return false
	}
	need, err := slurm.ExpandHostlist(m.Nodes)
	if err != nil {
		return false
	}
	partition := job.Partition
	if partition == "" {
		partition = m.Partition
	}
	part, ok := in.Partitions[partition]
	if !ok {
		return false
	}
	taken := map[string]bool{}
	for _, r := range in.Running {
		nodes, err := slurm.ExpandHostlist(r.NodeList)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			taken[n] = true
		}
	}
	free := 0
	for _, n := range part.Nodes {
		if !taken[n] {
			free++
		}
	}
	return len(need) > 0 && free >= len(need)
}

// findPreemptor is the running job of a higher-PriorityTier partition that
// holds nodes the tier's job held and started at or after the tier was
// preempted (Slurm does not name it); nil when none is found or the
// facts are missing. Among several, the one that ends last.
func findPreemptor(in viewInput, job slurm.QueuedJob, hasJob bool) *Preemptor {
	m := in.Mem
	if in.Running == nil || m.Nodes == "" || (hasJob && m.NodesJob != job.ID) {
		return nil
	}
	since := m.PreemptedAt()
	if since.IsZero() && hasJob && job.Restarts > 0 && job.State == slurm.JobPending {
		since = job.Submit // the requeue's second
	}
	if since.IsZero() {
		return nil
	}
	held, err := slurm.ExpandHostlist(m.Nodes)
	if err != nil {
		return nil
	}
	ownTier, ok := in.Partitions[m.Partition]
	if !ok {
		return nil
	}
	var best *slurm.QueuedJob
	for i := range in.Running {
		r := &in.Running[i]
		part, ok := in.Partitions[r.Partition]
		if r.State != slurm.JobRunning || !ok || part.PriorityTier <= ownTier.PriorityTier ||
			r.Start.Before(since.Add(-2*time.Second)) || !sharesNode(r.NodeList, held) {
			continue
		}
		if best == nil || laterEnd(r.End, best.End) {
			best = r
		}
	}
	if best == nil {
		return nil
	}
	p := &Preemptor{Job: best.ID, Name: best.Name, Partition: best.Partition}
	if !best.End.IsZero() && best.End.Sub(in.Now) < noEstimate {
		p.End = timePtr(best.End)
	}
	return p
}

// laterEnd orders ends with "no limit" (zero) last.
func laterEnd(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return !b.IsZero()
	case b.IsZero():
		return false
	}
	return a.After(b)
}

// sharesNode reports whether hostlist list names a node of held.
func sharesNode(list string, held []string) bool {
	nodes, err := slurm.ExpandHostlist(list)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if slices.Contains(held, n) {
			return true
		}
	}
	return false
}

// tierJob is the tier's one job among those listed: a running one, else
// the oldest (the keeper's choice).
func tierJob(jobs []slurm.QueuedJob) (slurm.QueuedJob, bool) {
	if len(jobs) == 0 {
		return slurm.QueuedJob{}, false
	}
	sorted := slices.Clone(jobs)
	sort.SliceStable(sorted, func(i, j int) bool {
		ri, rj := sorted[i].State == slurm.JobRunning, sorted[j].State == slurm.JobRunning
		if ri != rj {
			return ri
		}
		a, b := sorted[i].ID, sorted[j].ID
		if len(a) != len(b) {
			return len(a) < len(b)
		}
		return a < b
	})
	return sorted[0], true
}

// retryBuckets are the Retry-After values a 503 uses: the largest not past
// the estimate, so that a client comes back no later than expected and
// nginx is reloaded only when the remaining time crosses a bucket.
var retryBuckets = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour}

// retryAfter is the Retry-After in seconds for an expected return: the
// default when unknown or due, else the largest bucket within the wait
// (at least the smallest), at most RetryAfterMax.
func retryAfter(eta *time.Time, now time.Time, cfg OutageConfig) int {
	d := cfg.RetryAfter
	if eta != nil {
		left := eta.Sub(now)
		if left > retryBuckets[0] {
			d = retryBuckets[0]
			for _, b := range retryBuckets {
				if b <= left {
					d = b
				}
			}
		} else if left > 0 {
			d = retryBuckets[0]
		}
	}
	return int(min(d, cfg.RetryAfterMax) / time.Second)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// UnavailableBody is the JSON document a tier's 503 carries (nginx reads it
// from a file, the front door sends it itself): an
// OpenAI-shaped error and the view's reason and expected return (RFC 3339
// UTC or null). It holds no relative time, so it changes only when the
// facts do; Retry-After comes from the rendered upstream file.
func UnavailableBody(v TierView) []byte {
	reason := v.Reason
	if v.State != StateDown {
		reason = ReasonNoAnswer
	}
	msg := fmt.Sprintf("tier %s is unavailable: %s", v.Tier, reason)
	var back any
	if v.ExpectedBack != nil && v.State == StateDown {
		s := v.ExpectedBack.UTC().Format(time.RFC3339)
		back = s
		msg += "; expected back at " + s
	} else {
		msg += "; retry later"
	}
	doc := struct {
		Error        map[string]any `json:"error"`
		Tier         string         `json:"tier"`
		Reason       string         `json:"reason"`
		ExpectedBack any            `json:"expected_back"`
	}{Error: map[string]any{"message": msg, "type": "service_unavailable", "code": 503},
		Tier: v.Tier, Reason: reason, ExpectedBack: back}
	b, _ := json.Marshal(doc)
	return append(b, '\n')
}

// OneLineReason keeps a reason on a table row.
func OneLineReason(s string) string { return strings.Join(strings.Fields(s), " ") }
