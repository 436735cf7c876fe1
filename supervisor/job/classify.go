package job

import (
	"slurm-llm/slurm"
	"time"
)

// Cause is why a tier's run is ending, as far as the supervisor can tell
// from the notices it got and the job's state in Slurm. The zero value is
// not a cause; ClassifyNotice always returns one of the constants.
type Cause string

// The causes of a run's end. Each was seen on Slurm 22.05 (see
// supervisor/shim/FACTS.md and supervisor/testdata/notice/).
const (
	// CausePreempted: the job was picked for preemption and is in its grace
	// time (JobState RUNNING, PreemptTime set). Slurm requeues it at the end
	// of the grace only if the batch script is still running then.
	CausePreempted Cause = "preempted"
	// CauseRequeued: Slurm has already requeued the job (end of a
	// preemption grace, or `scontrol requeue`): Restarts went up. It comes
	// back by itself.
	CauseRequeued Cause = "requeued"
	// CauseCancelled: scancel. JobState COMPLETING (then CANCELLED) with
	// Restarts unchanged. Never requeued.
	CauseCancelled Cause = "cancelled"
	// CauseTimeLimit: the time limit is near (SIGUSR1 from
	// `--signal=B:USR1@N`) or reached (Reason TimeLimit, JobState TIMEOUT).
	CauseTimeLimit Cause = "time-limit"
	// CauseNodeLost: a node of the job is down or not responding.
	CauseNodeLost Cause = "node-lost"
	// CauseNodeUnusable: the tier gave up before it was ever ready because
	// a node of the job's allocation, up in Slurm, could not be used (steps
	// refused there, its worker unreachable: scripts/FACTS-cluster.md N6).
	// Unlike a lost node it counts as a failed run, so that a tier whose
	// nodes never work stops requeueing itself.
	CauseNodeUnusable Cause = "node-unusable"
	// CauseShutdown: the supervisor itself was told to stop (SIGTERM or
	// SIGINT) while Slurm shows nothing ending: an admin, systemd, a
	// terminal.
	CauseShutdown Cause = "shutdown"
	// CauseStepStopped: a step was signalled (an admin's `scancel
	// --signal=TERM JOB.STEP`, a node's cleanup script) while Slurm shows the
	// job RUNNING, not preempted, no node down: nothing ends the job.
	CauseStepStopped Cause = "step-stopped"
	// CauseUnknown: a stop notice arrived and Slurm could not be asked, or
	// its answer fits no case above.
	CauseUnknown Cause = "unknown"
)

// AfterDrain is what the supervisor does once its processes are stopped.
type AfterDrain string

// What follows the drain.
const (
	// AfterRequeue: run `scontrol requeue $SLURM_JOB_ID` (only after every
	// step has ended: a requeue sends SIGTERM to held steps and keeps the
	// nodes until KillWait), then exit.
	AfterRequeue AfterDrain = "requeue"
	// AfterExit: exit; Slurm is ending or requeueing the job already.
	AfterExit AfterDrain = "exit"
	// AfterRestart: start the tier again in this allocation: nothing ends
	// the job, and waiting would hold its nodes idle until the time limit.
	AfterRestart AfterDrain = "restart"
	// AfterWait: stay until Slurm's own SIGTERM, then exit. A preempted
	// batch script that exits before its grace ends leaves the job
	// COMPLETED and never requeued, so when in doubt, wait.
	AfterWait AfterDrain = "wait"
)

// NoticeFacts are the facts gathered when a stop notice arrives. Map them
// from slurm.JobInfo: JobKnown = (ShowJob error == nil), JobState =
// string(info.State), Reason = info.Reason, Preempted =
// !info.PreemptTime.IsZero(), Restarts = info.Restarts, Requeueable =
// info.Requeue; RunRestarts is the allocation's SLURM_RESTART_COUNT.
type NoticeFacts struct {
	// Signal is what the supervisor itself received: "SIGTERM", "SIGINT",
	// "SIGUSR1", or "" if the notice came from a shim only.
	Signal string
	// ShimSignal: at least one step's shim reported a stop signal (marker
	// event=signal).
	ShimSignal bool
	// JobKnown: `scontrol show job` answered; the fields below are valid.
	JobKnown bool
	// JobState and Reason as scontrol prints them ("RUNNING", "TimeLimit").
	JobState string
	Reason   string
	// Preempted: PreemptTime is set. Slurm clears it once the job is requeued.
	Preempted bool
	// PreemptTime is when Slurm picked the job for preemption (whole
	// seconds, so the real moment is up to a second later); zero if not.
	PreemptTime time.Time
	// Restarts is the job's restart count now; RunRestarts the count this
	// run started with (SLURM_RESTART_COUNT, 0 on the first run).
	Restarts    int
	RunRestarts int
	// Requeueable: the job may be requeued (Requeue=1).
	Requeueable bool
	// NodeDown: a node of the job is DOWN, FAIL or NOT_RESPONDING.
	NodeDown bool
}

// NoticeDecision is ClassifyNotice's answer.
type NoticeDecision struct {
	Cause Cause
	After AfterDrain
	// Why says which fact decided, for the log.
	Why string
	// Since is when the run's end began as Slurm tells it (PreemptTime for
	// a preemption; zero when Slurm gives no time): the drain budget
	// counts from it when it is earlier than the notice.
	Since time.Time
}

// ClassifyNotice decides why the run is ending and what follows the
// drain. Every cause drains (head first, then workers); only the step
// after differs. Slurm's own view wins over the signal seen, since the
// same SIGTERM arrives for preemption's end, cancel, requeue and time limit.
func ClassifyNotice(f NoticeFacts) NoticeDecision {
	if !f.JobKnown {
		return classifyBlind(f)
	}
	if d, ok := classifyEnding(f); ok {
		return d
	}
	switch {
	case f.Preempted:
		d := decide(CausePreempted, afterRequeue(f), "PreemptTime is set")
		d.Since = f.PreemptTime
		return d
	case f.NodeDown:
		return decide(CauseNodeLost, afterRequeue(f), "a node of the job is down")
	case f.Signal == "SIGUSR1":
		return decide(CauseTimeLimit, afterRequeue(f), "SIGUSR1: the time limit is near")
	case f.Signal == "SIGTERM" || f.Signal == "SIGINT":
		return decide(CauseShutdown, AfterExit, f.Signal+" while the job runs")
	}
	if f.JobState == "RUNNING" {
		return decide(CauseStepStopped, AfterRestart, "stop signal on a step, but the job is RUNNING, not preempted, no node down")
	}
	return decide(CauseUnknown, AfterWait, "stop signal on a step, job "+f.JobState+" and not preempted")
}

// classifyEnding covers a job Slurm is already ending or has requeued.
func classifyEnding(f NoticeFacts) (NoticeDecision, bool) {
	switch {
	case f.JobState == "CANCELLED":
		return decide(CauseCancelled, AfterExit, "JobState CANCELLED"), true
	case f.JobState == "TIMEOUT" || f.Reason == "TimeLimit":
		return decide(CauseTimeLimit, AfterExit, "time limit reached"), true
	case f.JobState == "NODE_FAIL":
		return decide(CauseNodeLost, AfterExit, "JobState NODE_FAIL"), true
	case f.Restarts > f.RunRestarts || slurm.JobState(f.JobState).Queued():
		return decide(CauseRequeued, AfterExit, "Slurm requeued the job"), true
	case f.JobState == "COMPLETING":
		return decide(CauseCancelled, AfterExit, "COMPLETING with restarts unchanged"), true
	}
	return NoticeDecision{}, false
}

// classifyBlind decides without Slurm's answer.
func classifyBlind(f NoticeFacts) NoticeDecision {
	switch {
	case f.Signal == "SIGUSR1":
		return decide(CauseTimeLimit, AfterRequeue, "SIGUSR1 (job state unknown)")
	case f.Signal == "SIGTERM" || f.Signal == "SIGINT":
		return decide(CauseUnknown, AfterExit, f.Signal+" to the supervisor (job state unknown)")
	}
	return decide(CauseUnknown, AfterWait, "stop signal on a step (job state unknown)")
}

// afterRequeue is AfterRequeue for a job that may be requeued, else
// AfterExit: a job that will never be requeued (sbatch --no-requeue)
// loses nothing by ending now, and its nodes go to the
// preemptor at once instead of at the end of the grace (measured: the
// preemptor started 0.9 s after such a batch script exited, slurm/FACTS.md).
func afterRequeue(f NoticeFacts) AfterDrain {
	if f.Requeueable {
		return AfterRequeue
	}
	return AfterExit
}

func decide(c Cause, a AfterDrain, why string) NoticeDecision {
	return NoticeDecision{Cause: c, After: a, Why: why}
}
