package keeper

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"slurm-llm/slurm"
)

// fakeSlurm is a Scheduler over an in-memory queue. One test goroutine
// drives it; the Keeper calls it from that goroutine.
type fakeSlurm struct {
	queue     map[string][]slurm.JobRef // job name → listed jobs
	nextID    int
	listErr   error // JobsByName fails with it when set
	submitErr error // Submit fails with it when set
	submits   []submitCall
	cancelled []string
	calls     int // JobsByName calls
	onList    func()
	// queued is what Queue lists (the release check); queueErr fails it.
	queued   []slurm.QueuedJob
	queueErr error
	released []string
	// releaseErr fails ReleaseNow.
	releaseErr error
	queries    []slurm.QueueQuery
	onQueue    func()
	// estimate is what TestSubmit answers (testErr fails it); tested
	// records its calls. parts is what Partitions answers.
	estimate slurm.StartEstimate
	testErr  error
	tested   []submitCall
	parts    map[string]slurm.Partition
	// config is what Config answers.
	config slurm.Config
}

func (f *fakeSlurm) TestSubmit(ctx context.Context, script string, args ...string) (slurm.StartEstimate, error) {
	f.tested = append(f.tested, submitCall{Script: script, Args: args})
	if f.testErr != nil {
		return slurm.StartEstimate{}, f.testErr
	}
	return f.estimate, nil
}

func (f *fakeSlurm) Partitions(ctx context.Context) (map[string]slurm.Partition, error) {
	if f.queueErr != nil {
		return nil, f.queueErr
	}
	return f.parts, nil
}

type submitCall struct {
	Script string
	Args   []string
}

func newFakeSlurm() *fakeSlurm { return &fakeSlurm{queue: map[string][]slurm.JobRef{}, nextID: 100} }

func (f *fakeSlurm) JobsByName(ctx context.Context, name string) ([]slurm.JobRef, error) {
	f.calls++
	if f.onList != nil {
		f.onList()
	}
	if f.listErr != nil {
		return nil, f.listErr
	}
	return append([]slurm.JobRef(nil), f.queue[name]...), nil
}

func (f *fakeSlurm) Submit(ctx context.Context, script string, args ...string) (string, error) {
	f.submits = append(f.submits, submitCall{Script: script, Args: args})
	if f.submitErr != nil {
		return "", f.submitErr
	}
	name := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--job-name="); ok {
			name = v
		}
	}
	if name == "" {
		return "", fmt.Errorf("fake sbatch: no --job-name in %v", args)
	}
	id := strconv.Itoa(f.nextID)
	f.nextID++
	f.queue[name] = append(f.queue[name], slurm.JobRef{ID: id, State: slurm.JobPending})
	return id, nil
}

func (f *fakeSlurm) Cancel(ctx context.Context, id string) error {
	f.cancelled = append(f.cancelled, id)
	for name, js := range f.queue {
		var keep []slurm.JobRef
		for _, j := range js {
			if j.ID != id {
				keep = append(keep, j)
			}
		}
		f.queue[name] = keep
	}
	return nil
}

func (f *fakeSlurm) Queue(ctx context.Context, q slurm.QueueQuery) ([]slurm.QueuedJob, error) {
	f.queries = append(f.queries, q)
	if f.onQueue != nil {
		f.onQueue()
	}
	if f.queueErr != nil {
		return nil, f.queueErr
	}
	return append([]slurm.QueuedJob(nil), f.queued...), nil
}

func (f *fakeSlurm) ReleaseNow(ctx context.Context, id string) error {
	if f.releaseErr != nil {
		return f.releaseErr
	}
	f.released = append(f.released, id)
	return nil
}

// set puts a job's state, as the scheduler would change it.
func (f *fakeSlurm) set(name, id string, state slurm.JobState) {
	for i, j := range f.queue[name] {
		if j.ID == id {
			f.queue[name][i].State = state
		}
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func (f *fakeSlurm) Config(ctx context.Context) (slurm.Config, error) {
	if f.queueErr != nil {
		return slurm.Config{}, f.queueErr
	}
	return f.config, nil
}
