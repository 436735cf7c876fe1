package keeper

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

// ScaleAction is what one scale check does about one tier with replicas.
type ScaleAction string

// The actions DecideScale chooses from.
const (
	// ScaleNothing: leave the tier's replicas as they are.
	ScaleNothing ScaleAction = "nothing"
	// ScaleTest: the tier has demand for another replica; ask Slurm
	// (sbatch --test-only) where and when one would start, then GrowCheck.
	ScaleTest ScaleAction = "test"
	// ScaleCancel: scancel ScaleDecision.Cancel (extra replicas only:
	// their supervisors drain on Slurm's SIGTERM, then the jobs end).
	ScaleCancel ScaleAction = "cancel"
	// ScaleUnknown: the scheduler or the endpoint directory did not
	// answer: nothing is submitted or cancelled.
	ScaleUnknown ScaleAction = "unknown"
)

// ScaleDecision is DecideScale's answer.
type ScaleDecision struct {
	Action ScaleAction
	// Reason says why, for logs and status.
	Reason string
	// Cancel are the extra replicas' jobs to scancel.
	Cancel []string
	// DemandSince is the tier's demand clock after this check (zero: no
	// demand); the caller keeps it in the tier's state.
	DemandSince time.Time
}

// ScaleFacts are what one scale check gathered: every job squeue lists
// (all users, pending and running), the partitions, and the tier's valid
// endpoint files. Err is the first failure to gather them: then nothing
// else is looked at.
type ScaleFacts struct {
	Jobs       []slurm.QueuedJob
	Partitions map[string]slurm.Partition
	Endpoints  []endpoints.Endpoint
	Err        error
}

// Replica is one of a tier's jobs as status shows it: its job, whether it
// is kept queued (min) or extra, its node, Slurm's state, and what its
// endpoint file says.
type Replica struct {
	JobID string         `json:"job_id"`
	Extra bool           `json:"extra"`
	State slurm.JobState `json:"state"`
	Node  string         `json:"node,omitempty"`
	// Partition is the job's (its first, as squeue lists it).
	Partition string `json:"partition"`
	// Restarts is how often Slurm requeued the job.
	Restarts int       `json:"restarts,omitempty"`
	Endpoint string    `json:"endpoint,omitempty"`
	InFlight *int      `json:"in_flight,omitempty"`
	Submit   time.Time `json:"submit"`
}

// Replicas lists the tier's jobs (kept and extra, of owner uid) with their
// endpoint files' state, kept ones first, then by job id.
func (f ScaleFacts) Replicas(cfg TierConfig, owner uint32) []Replica {
	files := map[string]endpoints.Endpoint{}
	for _, e := range f.Endpoints {
		if e.Tier == cfg.Name {
			files[e.JobID] = e
		}
	}
	var out []Replica
	for _, j := range f.Jobs {
		extra := j.Name == cfg.Replicas.ExtraJobName
		if j.UID != owner || (j.Name != cfg.JobName && !extra) {
			continue
		}
		r := Replica{JobID: j.ID, Extra: extra, State: j.State, Node: j.NodeList, Partition: j.Partition, Submit: j.Submit, Restarts: j.Restarts}
		if e, ok := files[j.ID]; ok {
			r.Endpoint, r.InFlight = string(e.State), e.InFlight
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Replica) int {
		if a.Extra != b.Extra {
			if a.Extra {
				return 1
			}
			return -1
		}
		return compareJobIDs(a.JobID, b.JobID)
	})
	return out
}

// EffectiveReplicas is the tier's replicas with an admin's `tier scale`
// applied (min and max from the state when set).
func EffectiveReplicas(cfg TierConfig, st TierState) Replicas {
	r := cfg.Replicas
	if st.ScaleMin != nil {
		r.Min = *st.ScaleMin
	}
	if st.ScaleMax != nil {
		r.Max = *st.ScaleMax
	}
	return r
}

// DecideScale is the scale policy for one tier in one check. It is pure.
// In order:
//   - facts not gathered: nothing (a scheduler error never submits or
//     cancels);
//   - an extra replica Slurm requeued (preempted: its supervisor requeued
//     it so that the node went to the preemptor at once; or its node was
//     lost): cancel it, an extra never runs again;
//   - an extra replica pending longer than start_timeout: cancel it (Slurm
//     could not start it at once after all);
//   - more replicas than max (an admin lowered it): cancel the newest extras;
//   - a job of another tier or user waits for a node an extra replica holds,
//     in a partition that cannot preempt it (the same or a lower
//     PriorityTier: a reasoning member, a plain job): cancel the newest
//     such extra, so the node goes to it (issue 14's rule: an extra
//     replica never keeps a node someone is queued for);
//   - disabled tier: nothing more;
//   - demand (routed replicas with more than in_flight_per_replica requests
//     in flight each, on average) held for grow_after, fewer than max
//     replicas, every running replica routed, no replica pending, the
//     hourly cap not reached: test a submit (ScaleTest), then GrowCheck.
func DecideScale(cfg TierConfig, st TierState, owner uint32, f ScaleFacts, now time.Time) ScaleDecision {
	if f.Err != nil {
		return ScaleDecision{Action: ScaleUnknown, Reason: f.Err.Error(), DemandSince: st.DemandSince}
	}
	rep := EffectiveReplicas(cfg, st)
	replicas := f.Replicas(cfg, owner)
	var kept, extras, pendingExtras, staleExtras, requeued []Replica
	for _, r := range replicas {
		if !liveStates[r.State] {
			continue
		}
		switch {
		case r.Extra && r.Restarts > 0:
			requeued = append(requeued, r)
		case !r.Extra:
			kept = append(kept, r)
		case r.State == slurm.JobPending && !r.Submit.IsZero() && now.Sub(r.Submit) >= rep.StartTimeout:
			staleExtras = append(staleExtras, r)
		case r.State == slurm.JobPending:
			pendingExtras = append(pendingExtras, r)
		default:
			extras = append(extras, r)
		}
	}
	if len(requeued) > 0 {
		return ScaleDecision{Action: ScaleCancel, Cancel: ids(requeued), DemandSince: st.DemandSince,
			Reason: fmt.Sprintf("extra replica %s was requeued (preempted, or its node lost): an extra never runs again",
				strings.Join(ids(requeued), ","))}
	}
	if len(staleExtras) > 0 {
		return ScaleDecision{Action: ScaleCancel, Cancel: ids(staleExtras), DemandSince: st.DemandSince,
			Reason: fmt.Sprintf("extra replica %s still pending %s after its submit (start_timeout): Slurm could not start it at once",
				strings.Join(ids(staleExtras), ","), rep.StartTimeout)}
	}
	newest := slices.Clone(extras)
	slices.SortFunc(newest, func(a, b Replica) int { return -compareJobIDs(a.JobID, b.JobID) })
	if over := len(kept) + len(extras) + len(pendingExtras) - max(rep.Max, rep.Min); over > 0 && len(pendingExtras)+len(newest) > 0 {
		cancel := append(ids(pendingExtras), ids(newest)...)
		cancel = cancel[:min(over, len(cancel))]
		return ScaleDecision{Action: ScaleCancel, Cancel: cancel,
			Reason: fmt.Sprintf("%d replicas, max %d", len(kept)+len(extras)+len(pendingExtras), rep.Max)}
	}
	if r, w, ok := yieldTo(cfg, owner, f, newest); ok {
		return ScaleDecision{Action: ScaleCancel, Cancel: []string{r.JobID},
			Reason: fmt.Sprintf("job %s (%s, partition %s, %s) is queued for node %s: extra replica %s gives it way",
				w.ID, w.Name, w.Partition, w.Reason, r.Node, r.JobID)}
	}
	if !st.IsEnabled(cfg) {
		return ScaleDecision{Action: ScaleNothing, Reason: "disabled by " + st.EnabledBy()}
	}
	routed, inFlight := routedLoad(f.Endpoints, cfg.Name, append(slices.Clone(kept), extras...))
	demand := routed > 0 && inFlight > rep.InFlightPerReplica*routed
	d := ScaleDecision{Action: ScaleNothing, DemandSince: st.DemandSince}
	if !demand {
		d.DemandSince = time.Time{}
		d.Reason = fmt.Sprintf("%d in flight on %d routed replicas (grows above %d each)", inFlight, routed, rep.InFlightPerReplica)
		return d
	}
	if d.DemandSince.IsZero() {
		d.DemandSince = now
	}
	running := 0
	for _, r := range append(slices.Clone(kept), extras...) {
		if isRunning(r.State) {
			running++
		}
	}
	total := len(kept) + len(extras) + len(pendingExtras)
	switch {
	case total >= rep.Max:
		d.Reason = fmt.Sprintf("%d in flight on %d routed replicas: at max (%d)", inFlight, routed, rep.Max)
	case len(pendingExtras) > 0 || running < len(kept)+len(extras):
		d.Reason = "a replica is pending: waiting for it before growing again"
	case routed < running:
		d.Reason = fmt.Sprintf("%d of %d running replicas routed: waiting for the others to load before growing again", routed, running)
	case now.Sub(d.DemandSince) < rep.GrowAfter:
		d.Reason = fmt.Sprintf("%d in flight on %d routed replicas since %s (grows after %s)", inFlight, routed,
			d.DemandSince.UTC().Format(time.RFC3339), rep.GrowAfter)
	case len(recentSubmits(st.ExtraSubmits, now)) >= cfg.MaxSubmitsPerHour*max(rep.Max-rep.Min, 1):
		d.Reason = fmt.Sprintf("%d extra replicas submitted in the last hour (max_submits_per_hour × (max − min))", len(recentSubmits(st.ExtraSubmits, now)))
	default:
		d.Action = ScaleTest
		d.Reason = fmt.Sprintf("%d in flight on %d routed replicas for %s: growing to %d", inFlight, routed,
			now.Sub(d.DemandSince).Round(time.Second), total+1)
	}
	return d
}

// routedLoad counts the replicas (of jobs) whose endpoint file says ready,
// and the requests in flight they published (unknown counts as none).
func routedLoad(files []endpoints.Endpoint, tier string, jobs []Replica) (routed, inFlight int) {
	mine := map[string]bool{}
	for _, r := range jobs {
		mine[r.JobID] = true
	}
	for _, e := range files {
		if e.Tier != tier || !mine[e.JobID] || e.State != endpoints.StateReady {
			continue
		}
		routed++
		if e.InFlight != nil {
			inFlight += *e.InFlight
		}
	}
	return routed, inFlight
}

// yieldTo finds an extra replica (newest first) whose node a job waits
// for: a pending job, not held, not this tier's, waiting for resources or
// priority (or its begin time: a requeued job about to be released), in a
// partition that holds the node and cannot preempt the replica (a job of a
// higher PriorityTier preempts it, and Slurm picks which job goes; the
// keeper cancelling another one too would cost a second replica).
func yieldTo(cfg TierConfig, owner uint32, f ScaleFacts, extras []Replica) (Replica, slurm.QueuedJob, bool) {
	for _, r := range extras {
		nodes, err := slurm.ExpandHostlist(r.Node)
		if err != nil || len(nodes) == 0 {
			continue
		}
		for _, w := range waitingJobs(cfg, owner, f.Jobs) {
			part, ok := f.Partitions[w.Partition]
			if !ok || !overlaps(part.Nodes, nodes) {
				continue
			}
			if own, ok := f.Partitions[r.Partition]; ok && part.PriorityTier > own.PriorityTier {
				continue // Slurm preempts for it
			}
			return r, w, true
		}
	}
	return Replica{}, slurm.QueuedJob{}, false
}

// waitingJobs are the pending jobs that want nodes now, but this tier's.
func waitingJobs(cfg TierConfig, owner uint32, jobs []slurm.QueuedJob) []slurm.QueuedJob {
	var out []slurm.QueuedJob
	for _, j := range jobs {
		if j.State != slurm.JobPending || j.Held() || !wantsNodes[j.Reason] {
			continue
		}
		if j.UID == owner && (j.Name == cfg.JobName || j.Name == cfg.Replicas.ExtraJobName) {
			continue
		}
		out = append(out, j)
	}
	return out
}

// wantsNodes are the pending reasons of a job that waits for nodes (or is
// about to: BeginTime is a requeued job's hold, which the keeper lifts);
// a job waiting for a dependency, a limit or a hold does not.
var wantsNodes = map[string]bool{"Resources": true, "Priority": true, "None": true, "BeginTime": true,
	"ReqNodeNotAvail": true, "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions": true}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func ids(rs []Replica) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.JobID)
	}
	return out
}

// startSlack is how far in the future sbatch --test-only's start may be
// and still be "now": its start time is whole seconds.
const startSlack = 2 * time.Second

// GrowCheck decides, from sbatch --test-only's answer, whether the extra
// replica may be submitted: Slurm would start it now (within startSlack),
// and no other job is queued for a node of its partition (one Slurm will
// start before it only if it can; the keeper does not make it wait). It
// is pure; "" means grow.
func GrowCheck(cfg TierConfig, owner uint32, est slurm.StartEstimate, f ScaleFacts, now time.Time) string {
	if est.Start.After(now.Add(startSlack)) {
		return fmt.Sprintf("Slurm would start it at %s, not now: no idle node", est.Start.UTC().Format(time.RFC3339))
	}
	part, ok := f.Partitions[est.Partition]
	nodes := est.Nodes
	if ok {
		nodes = part.Nodes
	}
	for _, w := range waitingJobs(cfg, owner, f.Jobs) {
		if wp, ok := f.Partitions[w.Partition]; ok && overlaps(wp.Nodes, nodes) {
			return fmt.Sprintf("job %s (%s, partition %s, %s) is queued for these nodes", w.ID, w.Name, w.Partition, w.Reason)
		}
		if w.Partition == est.Partition {
			return fmt.Sprintf("job %s (%s, %s) is queued in partition %s", w.ID, w.Name, w.Reason, w.Partition)
		}
	}
	return ""
}
