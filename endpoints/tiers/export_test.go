package tiers

import (
	"time"

	"slurm-llm/slurm"
)

// What the external tests (package tiers_test: the core with its nginx
// consumer, which imports this package) take from the internal ones.
var (
	T0           = t0
	Me           = me
	NewConfig    = testConfig
	EndpointAt   = testEndpoint
	ParseOwn     = parseOwn
	SaveMem      = saveMem
	WatchDirFor  = watchDir
	JobOf        = jobOf
	SettleFile   = settle
	EveryRunning = allRunning{}
)

// TierMem is a tier's memory, as the tests seed it.
type TierMem = tierMem

// FakeQueue is the tier questions' fake (fakeQueue).
type FakeQueue = fakeQueue

// NewFakeQueue is a fake queue answering jobs.
func NewFakeQueue(jobs ...slurm.QueuedJob) *FakeQueue { return &fakeQueue{jobs: jobs} }

// SetQueued changes the fake's jobs while a pass may read them.
func (f *fakeQueue) SetQueued(change func(jobs []slurm.QueuedJob)) {
	f.set(func(q *fakeQueue) { change(q.jobs) })
}

// ForgetTierAnswer makes the tier questions due again.
func (u *Updater) ForgetTierAnswer() { u.tiers.last.at = time.Time{} }
