package tiers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"slurm-llm/endpoints"
)

// Job is what the scheduler says about one job.
type Job struct {
	// State is Slurm's state ("RUNNING", "PENDING", …); only RUNNING is routed.
	State string
	// UID is the job's owner; an endpoint file is routed only when its
	// owner owns the job it names.
	UID uint32
	// Name is the job's name; it must be its tier's job_name.
	Name string
}

// Scheduler asks Slurm about many jobs in one call. Jobs returns what it
// knows of each id; an id absent from the map is gone. An error means the
// answer is unknown, never that the jobs are gone. cmd/llm-upstreams
// adapts slurm.Client (squeue -h --states=all -j IDS -o "%i %T %U %j").
type Scheduler interface {
	Jobs(ctx context.Context, ids []string) (map[string]Job, error)
}

// Why values the updater adds to endpoints.Decide's.
const (
	// WhyNotConfigured: the file's tier is not in upstreams.toml.
	WhyNotConfigured = "tier not configured"
	// WhyAwaitingScheduler: the scheduler answers, but has not yet been
	// asked about this job (it appeared since); the next pass routes it
	// or not.
	WhyAwaitingScheduler = "job not checked yet"
)

// whyWrongOwner is the Why of a file whose job belongs to someone else.
func whyWrongOwner(job Job, fileUID uint32) string {
	return "job owned by uid " + strconv.FormatUint(uint64(job.UID), 10) +
		", not by the file's owner (uid " + strconv.FormatUint(uint64(fileUID), 10) + ")"
}

// whyWrongName is the Why of a file whose job is not named as its tier's.
func whyWrongName(job Job, want string) string {
	return fmt.Sprintf("job named %q, not %q", job.Name, want)
}

// schedState is what the updater remembers of the scheduler between
// passes: the last answer, reused while it covers the candidate jobs and
// is younger than maxAge, and while the scheduler does not answer, when to
// try again (exponential backoff from maxAge up to backoffMax). The zero
// value has asked nothing. It is a pure policy: times are given.
type schedState struct {
	asked    []string // sorted ids of the last answer
	jobs     map[string]Job
	at       time.Time // when the last answer came
	err      error     // the last call's error; nil after an answer
	failures int       // calls failed in a row
	retryAt  time.Time // no call before this while err is set
}

// due reports whether the scheduler should be asked about cands at now:
// not while backing off after a failure; not while the last answer covers
// cands and is younger than maxAge; else yes (a job not asked about yet is
// asked about at once).
func (s *schedState) due(cands []string, now time.Time, maxAge time.Duration) bool {
	switch {
	case len(cands) == 0:
		return false
	case s.err != nil:
		return !now.Before(s.retryAt)
	case s.jobs == nil:
		return true
	}
	return !covers(s.asked, cands) || now.Sub(s.at) >= maxAge
}

// record keeps the outcome of asking about ids at now. A failure starts
// or lengthens the backoff: maxAge, then doubled per failure in a row, at
// most backoffMax; an answer resets it.
func (s *schedState) record(ids []string, jobs map[string]Job, err error, now time.Time, maxAge, backoffMax time.Duration) {
	if err != nil {
		s.err, s.jobs, s.asked = err, nil, nil
		s.failures++
		s.retryAt = now.Add(backoff(s.failures, maxAge, backoffMax))
		return
	}
	if jobs == nil {
		jobs = map[string]Job{}
	}
	*s = schedState{asked: slices.Clone(ids), jobs: jobs, at: now}
}

// backoff is the wait after n failures in a row.
func backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// view is the scheduler's state for a pass over cands: while the last
// call failed, unknown (nothing is dropped for the scheduler's sake);
// else the last answer, with the candidates it does not cover returned as
// pending (held back until asked: a job must be checked before it is
// routed, so that a file cannot borrow another user's job meanwhile).
func (s *schedState) view(cands []string) (endpoints.JobStates, map[string]bool) {
	if s.err != nil {
		return endpoints.JobStates{Asked: true, Err: s.err}, nil
	}
	states := make(map[string]string, len(s.jobs))
	for id, j := range s.jobs {
		states[id] = j.State
	}
	pending := map[string]bool{}
	for _, id := range cands {
		if _, ok := slices.BinarySearch(s.asked, id); !ok {
			pending[id] = true
		}
	}
	return endpoints.JobStates{Asked: true, States: states}, pending
}

// covers reports whether every id of cands (sorted) is in asked (sorted).
func covers(asked, cands []string) bool {
	for _, id := range cands {
		if _, ok := slices.BinarySearch(asked, id); !ok {
			return false
		}
	}
	return true
}
