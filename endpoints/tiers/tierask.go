package tiers

import (
	"context"
	"fmt"
	"time"

	"slurm-llm/slurm"
)

// Queue is what the tier views ask Slurm: the tiers' jobs by name with
// their reasons and estimates, the running jobs (to find a preemptor) and
// the partitions' priority tiers. *slurm.Client implements it. An error
// means "unknown", never "no job".
type Queue interface {
	Queue(ctx context.Context, q slurm.QueueQuery) ([]slurm.QueuedJob, error)
	Partitions(ctx context.Context) (map[string]slurm.Partition, error)
}

// partitionsMaxAge is how long the partitions' tiers are reused.
const partitionsMaxAge = 10 * time.Minute

// tierAnswer is one round of tier questions: one squeue for the tiers'
// jobs, and while a tier is not routed, one for the running jobs and (at
// most every partitionsMaxAge) the partitions.
type tierAnswer struct {
	jobs    []slurm.QueuedJob
	running []slurm.QueuedJob // nil: not asked
	parts   map[string]slurm.Partition
	err     error
	at      time.Time
}

// tierAsk is the updater's state of those questions: the last answer, and
// while the scheduler does not answer, when to try again. It is a pure
// policy: times are given.
type tierAsk struct {
	last     tierAnswer
	asked    bool // an answer (or error) has come
	parts    map[string]slurm.Partition
	partsAt  time.Time
	failures int
	retryAt  time.Time
	// now asks again at once (not waiting for the sweep): a tier's file
	// began to drain without saying why ("shutdown": its supervisor asks
	// Slurm too), and Slurm's answer names the cause. asked holds the runs
	// already asked about, so that one drain asks once.
	now      bool
	askedFor map[string]bool
}

// due reports whether to ask at now: every maxAge while every tier is
// routed, every sweep while one is not (its 503 and record follow Slurm),
// and after a failure not before the backoff ends.
func (a *tierAsk) due(now time.Time, anyDown bool, maxAge, sweep time.Duration) bool {
	switch {
	case !a.asked:
		return true
	case a.last.err != nil:
		return !now.Before(a.retryAt)
	case a.now:
		return true
	case anyDown:
		return now.Sub(a.last.at) >= sweep
	}
	return now.Sub(a.last.at) >= maxAge
}

// record keeps an answer; a failure starts or lengthens the backoff.
func (a *tierAsk) record(ans tierAnswer, maxAge, backoffMax time.Duration) {
	a.asked, a.now = true, false
	if ans.err != nil {
		a.failures++
		a.retryAt = ans.at.Add(backoff(a.failures, maxAge, backoffMax))
		a.last = tierAnswer{err: ans.err, at: ans.at}
		return
	}
	a.failures = 0
	if ans.parts != nil {
		a.parts, a.partsAt = ans.parts, ans.at
	}
	a.last = ans
}

// needParts reports whether the partitions must be asked for again.
func (a *tierAsk) needParts(now time.Time) bool {
	return a.parts == nil || now.Sub(a.partsAt) >= partitionsMaxAge
}

// askTiers asks q about the jobs named names, and, with running, about
// the running jobs and (with parts) the partitions. Each call is bounded
// by timeout. It touches nothing of the updater: watch runs it in its own
// goroutine.
func askTiers(ctx context.Context, q Queue, timeout time.Duration, names []string, running, parts bool, now func() time.Time) tierAnswer {
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return f(cctx)
	}
	var ans tierAnswer
	err := call(func(c context.Context) (err error) {
		ans.jobs, err = q.Queue(c, slurm.QueueQuery{Names: names})
		return err
	})
	if err == nil && running {
		err = call(func(c context.Context) (err error) {
			ans.running, err = q.Queue(c, slurm.QueueQuery{States: []string{string(slurm.JobRunning)}})
			if ans.running == nil {
				ans.running = []slurm.QueuedJob{}
			}
			return err
		})
	}
	if err == nil && running && parts {
		err = call(func(c context.Context) (err error) {
			ans.parts, err = q.Partitions(c)
			return err
		})
	}
	if err != nil {
		return tierAnswer{err: fmt.Errorf("ask the scheduler about the tiers' jobs: %w", err), at: now()}
	}
	ans.at = now()
	return ans
}
