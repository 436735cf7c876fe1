package tiers

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
)

var outageCfg = OutageConfig{RetryAfter: 30 * time.Second, RetryAfterMax: time.Hour, ReadySamples: 20}

// tierJobAt is tier fast's job 7 as squeue lists it; change edits it.
func tierJobAt(state slurm.JobState, reason string, change func(*slurm.QueuedJob)) slurm.QueuedJob {
	j := slurm.QueuedJob{ID: "7", State: state, Reason: reason, Submit: t0.Add(-time.Minute), Priority: 100,
		Restarts: 1, UID: 990, Partition: "gpu_ai", Name: "llm-fast"}
	if change != nil {
		change(&j)
	}
	return j
}

// vasp is a running gpu_vasp job on node1 started at start, ending at end
// (zero: no time limit).
func vasp(id string, start, end time.Time) slurm.QueuedJob {
	return slurm.QueuedJob{ID: id, State: slurm.JobRunning, Reason: "None", Start: start, End: end, Priority: 1,
		UID: 1001, Partition: "gpu_vasp", NodeList: "node1", Name: "vasp"}
}

var parts = map[string]slurm.Partition{"gpu_ai": {Name: "gpu_ai", PriorityTier: 1}, "gpu_vasp": {Name: "gpu_vasp", PriorityTier: 10},
	"low": {Name: "low", PriorityTier: 0}}

// ranOnNode1 is the memory of a tier whose job 7 ran on node1 and was
// preempted at t0-50s, with a median start-to-routed of 20 s.
var ranOnNode1 = tierMem{Ready: []float64{10, 20, 30}, Nodes: "node1", NodesJob: "7", Partition: "gpu_ai",
	Preempted: &preemptMark{Job: "7", At: t0.Add(-50 * time.Second)}}

// fileIn is a decision on tier fast's file in state st, started at started.
func fileIn(st endpoints.State, reason string, started time.Time) endpoints.Decision {
	e := testEndpoint("fast", "7", "10.0.0.1", 8080)
	e.State, e.Reason, e.StartedAt, e.LeaseExpires = st, reason, started, t0.Add(time.Minute)
	return endpoints.Decision{Entry: endpoints.Entry{File: "fast-7.json", Endpoint: e}, Why: string(st)}
}

func tp(t time.Time) *time.Time { return &t }

// runOf is d written by the run of restart count n.
func runOf(d endpoints.Decision, n int) endpoints.Decision {
	d.Endpoint.RestartCount = n
	return d
}

// refusedFile is tier fast's ready file, kept from routing for why.
func refusedFile(why string) endpoints.Decision {
	d := fileIn(endpoints.StateReady, "", t0.Add(-time.Minute))
	d.Why = why
	return d
}

func TestComputeView(t *testing.T) {
	releasing := keeperTier{Known: true, Enabled: true, By: "config", Release: true}
	tests := []struct {
		name string
		in   viewInput
		want TierView // Tier, StartToReady and ReadySamples are filled in
	}{
		{name: "routed", in: viewInput{Own: true, ServedBy: "fast", Asked: true,
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", nil)}},
			want: TierView{State: StateRouted, ServedBy: "fast", Reason: ReasonRouted, Job: "7", JobState: "RUNNING", JobReason: "None", RetryAfter: 30}},
		{name: "routed on fewer nodes (elastic): what its live endpoint serves with", in: viewInput{Own: true, ServedBy: "fast",
			Decisions: []endpoints.Decision{fileIn(endpoints.StateStarting, "", t0), servingFile("2 of 3 nodes, context 65536")}},
			want: TierView{State: StateRouted, ServedBy: "fast", Reason: ReasonRouted, Serving: "2 of 3 nodes, context 65536", RetryAfter: 30}},
		{name: "served by its backup, preempted", in: viewInput{ServedBy: "big", Asked: true, Mem: ranOnNode1,
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", nil)}},
			want: TierView{State: StateBackup, ServedBy: "big", Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources", RetryAfter: 30}},
		{name: "disabled by an admin: no estimate", in: viewInput{Asked: true, Keeper: keeperTier{Known: true, By: "admin"}},
			want: TierView{State: StateDown, Reason: ReasonDisabled, RetryAfter: 30}},
		{name: "starting (its file says so): expected at its start + the median", in: viewInput{Asked: true, Mem: ranOnNode1,
			Decisions: []endpoints.Decision{fileIn(endpoints.StateStarting, "", t0.Add(-5*time.Second))}},
			want: TierView{State: StateDown, Reason: ReasonStarting, ExpectedBack: tp(t0.Add(15 * time.Second)), RetryAfter: 10}},
		{name: "an elastic tier re-planning (its head drains to reload on fewer nodes): back after a load", in: viewInput{Asked: true,
			Mem: ranOnNode1, Decisions: []endpoints.Decision{fileIn(endpoints.StateDraining, "re-planning: member 204 leaves", t0.Add(-time.Hour))}},
			want: TierView{State: StateDown, Reason: ReasonReplanning, ExpectedBack: tp(t0.Add(20 * time.Second)), RetryAfter: 10}},
		{name: "starting for longer than the median: overdue, unknown, come back soon", in: viewInput{Asked: true, Mem: ranOnNode1,
			Decisions: []endpoints.Decision{fileIn(endpoints.StateStarting, "", t0.Add(-time.Minute))}},
			want: TierView{State: StateDown, Reason: ReasonStarting, RetryAfter: 10, Overdue: true}},
		// Regression: past its time limit the preemptor still ran (Slurm's
		// periodic check), Slurm's estimate for the tier moved with the
		// clock, and the 503 flipped between an estimate and none every
		// second (a reload each time its Retry-After moved).
		{name: "preemptor past its time limit, Slurm's estimate moving with the clock: overdue, no estimate",
			in: viewInput{Asked: true, Mem: ranOnNode1, Partitions: parts,
				Jobs:    []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", func(j *slurm.QueuedJob) { j.Start = t0.Add(time.Second) })},
				Running: []slurm.QueuedJob{vasp("9", t0.Add(-45*time.Second), t0.Add(-5*time.Second))}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources",
				Preemptor: &Preemptor{Job: "9", Name: "vasp", Partition: "gpu_vasp", End: tp(t0.Add(-5 * time.Second))}, RetryAfter: 10, Overdue: true}},
		{name: "starting, never measured: unknown", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{fileIn(endpoints.StateStarting, "", t0.Add(-5*time.Second))}},
			want: TierView{State: StateDown, Reason: ReasonStarting, RetryAfter: 30}},
		// Regression (issue 21): right after a preemption the 503 said
		// "starting: loading the model" for ~3 s: the file was gone and a
		// listing from before the requeue showed the preempted run RUNNING.
		{name: "preempted, its file gone, a listing from before the requeue: preempted, not starting", in: viewInput{Asked: true,
			Mem:  tierMem{Ready: []float64{20}, Preempted: &preemptMark{Job: "7", At: t0.Add(-2 * time.Second), Restarts: 1}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.Start = t0.Add(-time.Hour) })}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "RUNNING", JobReason: "None", RetryAfter: 30}},
		{name: "the next run of a preempted job running: starting", in: viewInput{Asked: true,
			Mem:  tierMem{Ready: []float64{20}, Preempted: &preemptMark{Job: "7", At: t0.Add(-9 * time.Second), Restarts: 1}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.Restarts, j.Start = 2, t0.Add(-time.Second) })}},
			want: TierView{State: StateDown, Reason: ReasonStarting, Job: "7", JobState: "RUNNING", JobReason: "None",
				ExpectedBack: tp(t0.Add(19 * time.Second)), RetryAfter: 10}},
		// Regression (issue 21): the log said stopping → starting →
		// preempted at every preemption: the supervisor drains at once
		// ("shutdown") and names the cause when Slurm told it.
		{name: "draining at the notice, Slurm already shows the preemption: preempted", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{runOf(fileIn(endpoints.StateDraining, "shutdown", t0.Add(-time.Hour)), 1)},
			Jobs:      []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.Preempt = t0.Add(-time.Second) })}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "RUNNING", JobReason: "None", RetryAfter: 30}},
		{name: "draining at the notice, no preemption known: stopping", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{fileIn(endpoints.StateDraining, "shutdown", t0.Add(-time.Hour))},
			Jobs:      []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", nil)}},
			want: TierView{State: StateDown, Reason: ReasonStopping, Job: "7", JobState: "RUNNING", JobReason: "None", RetryAfter: 30}},
		// Regression (issue 21): a file refused for its job's name read as
		// "not queued: no job for this tier" (the job, named otherwise, is
		// not the tier's), while status's file table said why.
		{name: "its ready file refused for its job's name: says so, and why", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{refusedFile(`job named "llm-fst", not "llm-fast"`)}},
			want: TierView{State: StateDown, Reason: ReasonRefused + " (fast-7.json: its job is not named as the tier's jobs)", RetryAfter: 30}},
		{name: "a file of the tier refused by the scan: says so, and why", in: viewInput{Asked: true,
			Rejected: []endpoints.Rejected{{File: "fast-7.json", Reason: "owned by uid 1001, not an allowed owner"}}},
			want: TierView{State: StateDown, Reason: ReasonRefused + " (fast-7.json: its owner is not an allowed owner)", RetryAfter: 30}},
		// A cluster user's file must not put its words in front of every
		// user of the tier: the 503 quoted a parse error's excerpt of it.
		{name: "a refused file's content is never quoted", in: viewInput{Asked: true,
			Rejected: []endpoints.Rejected{{File: "fast-41.json", Reason: `parse: parsing time "127.0.0.1:1; } server PWNED:80; #" as "2006-01-02T15:04:05Z07:00"`}}},
			want: TierView{State: StateDown, Reason: ReasonRefused + " (fast-41.json: its content is not a valid endpoint file)", RetryAfter: 30}},
		{name: "nor a job's name", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{refusedFile(`job named "Free GPUs at evil.example", not "llm-fast"`)}},
			want: TierView{State: StateDown, Reason: ReasonRefused + " (fast-7.json: its job is not named as the tier's jobs)", RetryAfter: 30}},
		{name: "draining for a preemption", in: viewInput{Asked: true,
			Decisions: []endpoints.Decision{fileIn(endpoints.StateDraining, "preempted", t0.Add(-time.Hour))}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, RetryAfter: 30}},
		{name: "scheduler does not answer: unknown, no crash", in: viewInput{Asked: true, QueueErr: errors.New("down"), Mem: ranOnNode1},
			want: TierView{State: StateDown, Reason: ReasonUnknown, RetryAfter: 30}},
		{name: "no job at all", in: viewInput{Asked: true},
			want: TierView{State: StateDown, Reason: ReasonNotQueued, RetryAfter: 30}},
		{name: "held by an admin", in: viewInput{Asked: true, Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "JobHeldAdmin",
			func(j *slurm.QueuedJob) { j.Priority = 0 })}},
			want: TierView{State: StateDown, Reason: ReasonHeld, Job: "7", JobState: "PENDING", JobReason: "JobHeldAdmin", RetryAfter: 30}},
		{name: "preempted, pending without an estimate yet: the preemptor's end by its time limit + the median",
			in: viewInput{Asked: true, Mem: ranOnNode1, Partitions: parts,
				Jobs:    []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", nil)},
				Running: []slurm.QueuedJob{vasp("9", t0.Add(-40*time.Second), t0.Add(50*time.Second))}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources",
				Preemptor:    &Preemptor{Job: "9", Name: "vasp", Partition: "gpu_vasp", End: tp(t0.Add(50 * time.Second))},
				ExpectedBack: tp(t0.Add(70 * time.Second)), RetryAfter: 60}},
		{name: "preempted, Slurm's estimate wins over the preemptor's end",
			in: viewInput{Asked: true, Mem: ranOnNode1, Partitions: parts,
				Jobs:    []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", func(j *slurm.QueuedJob) { j.Start = t0.Add(100 * time.Second) })},
				Running: []slurm.QueuedJob{vasp("9", t0.Add(-40*time.Second), t0.Add(50*time.Second))}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources",
				Preemptor:    &Preemptor{Job: "9", Name: "vasp", Partition: "gpu_vasp", End: tp(t0.Add(50 * time.Second))},
				ExpectedBack: tp(t0.Add(120 * time.Second)), RetryAfter: 120}},
		{name: "preemptor without a time limit, Slurm's estimate a year away: unknown",
			in: viewInput{Asked: true, Mem: ranOnNode1, Partitions: parts,
				Jobs:    []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", func(j *slurm.QueuedJob) { j.Start = t0.AddDate(1, 0, 0) })},
				Running: []slurm.QueuedJob{vasp("9", t0.Add(-40*time.Second), time.Time{})}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources",
				Preemptor: &Preemptor{Job: "9", Name: "vasp", Partition: "gpu_vasp"}, RetryAfter: 30}},
		{name: "queued, an estimate in the past (stale): unknown", in: viewInput{Asked: true, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", func(j *slurm.QueuedJob) { j.Restarts, j.Start = 0, t0.Add(-time.Second) })}},
			want: TierView{State: StateDown, Reason: ReasonQueued, Job: "7", JobState: "PENDING", JobReason: "Resources", RetryAfter: 30}},
		{name: "queued with an estimate", in: viewInput{Asked: true, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Priority", func(j *slurm.QueuedJob) { j.Restarts, j.Start = 0, t0.Add(10*time.Minute) })}},
			want: TierView{State: StateDown, Reason: ReasonQueued, Job: "7", JobState: "PENDING", JobReason: "Priority",
				ExpectedBack: tp(t0.Add(10*time.Minute + 20*time.Second)), RetryAfter: 600}},
		{name: "requeued, held 121 s, the keeper releases it: the hold is no estimate", in: viewInput{Asked: true,
			Keeper: releasing, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "BeginTime", func(j *slurm.QueuedJob) { j.Start = t0.Add(2 * time.Minute) })}},
			want: TierView{State: StateDown, Reason: ReasonRequeued, Job: "7", JobState: "PENDING", JobReason: "BeginTime", RetryAfter: 30}},
		{name: "requeued, nobody releases it: Slurm's hold is the estimate", in: viewInput{Asked: true, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "BeginTime", func(j *slurm.QueuedJob) { j.Start = t0.Add(2 * time.Minute) })}},
			want: TierView{State: StateDown, Reason: ReasonRequeued, Job: "7", JobState: "PENDING", JobReason: "BeginTime",
				ExpectedBack: tp(t0.Add(140 * time.Second)), RetryAfter: 120}},
		{name: "running and being preempted", in: viewInput{Asked: true, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.Preempt = t0 })}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "RUNNING", JobReason: "None", RetryAfter: 30}},
		{name: "running, no file yet: starting since the job's start", in: viewInput{Asked: true, Mem: tierMem{Ready: []float64{20}},
			Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobRunning, "None", func(j *slurm.QueuedJob) { j.Start = t0.Add(-5 * time.Second) })}},
			want: TierView{State: StateDown, Reason: ReasonStarting, Job: "7", JobState: "RUNNING", JobReason: "None",
				ExpectedBack: tp(t0.Add(15 * time.Second)), RetryAfter: 10}},
		{name: "no preemptor among a lower partition's job and one that started before the preemption",
			in: viewInput{Asked: true, Mem: ranOnNode1, Partitions: parts,
				Jobs: []slurm.QueuedJob{tierJobAt(slurm.JobPending, "Resources", nil)},
				Running: []slurm.QueuedJob{func() slurm.QueuedJob { j := vasp("9", t0, t0.Add(time.Hour)); j.Partition = "low"; return j }(),
					vasp("10", t0.Add(-time.Hour), t0.Add(time.Hour))}},
			want: TierView{State: StateDown, Reason: ReasonPreempted, Job: "7", JobState: "PENDING", JobReason: "Resources", RetryAfter: 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Tier, in.Now, in.Cfg = "fast", t0, outageCfg
			got := computeView(in)
			want := tt.want
			want.Tier, want.StartToReady, want.ReadySamples = "fast", in.Mem.medianReady(), len(in.Mem.Ready)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("view (-want +got):\n%s", d)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		left time.Duration
		none bool
		want int
	}{
		{none: true, want: 30}, {left: -time.Minute, want: 30}, {left: 0, want: 30}, {left: 3 * time.Second, want: 10},
		{left: 29 * time.Second, want: 10}, {left: 30 * time.Second, want: 30}, {left: 5 * time.Minute, want: 300},
		{left: 3 * 24 * time.Hour, want: 3600}, // capped at retry_after_max
	} {
		var eta *time.Time
		if !tt.none {
			eta = tp(t0.Add(tt.left))
		}
		if got := retryAfter(eta, t0, outageCfg); got != tt.want {
			t.Errorf("retryAfter(%v left, none=%v) = %d, want %d", tt.left, tt.none, got, tt.want)
		}
	}
}

func TestUnavailableBody(t *testing.T) {
	var doc struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
		Tier         string  `json:"tier"`
		Reason       string  `json:"reason"`
		ExpectedBack *string `json:"expected_back"`
	}
	b := UnavailableBody(TierView{Tier: "fast", State: StateDown, Reason: ReasonPreempted, ExpectedBack: tp(t0.Add(90 * time.Second)), RetryAfter: 60})
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if doc.ExpectedBack == nil || *doc.ExpectedBack != "2026-11-21T12:01:30Z" || doc.Reason != ReasonPreempted ||
		doc.Error.Code != 503 || doc.Error.Type != "service_unavailable" || doc.Tier != "fast" {
		t.Errorf("body %s", b)
	}
	b = UnavailableBody(TierView{Tier: "fast", State: StateDown, Reason: ReasonUnknown})
	if err := json.Unmarshal(b, &doc); err != nil || doc.ExpectedBack != nil {
		t.Errorf("unknown: expected_back must be null: %s (%v)", b, err)
	}
}

// FuzzComputeView: whatever times Slurm gives (absent, past, far future),
// a view never crashes and never expects a tier back before now.
func FuzzComputeView(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), int64(0), "Resources", uint8(0))
	f.Add(int64(90), int64(-30), int64(60), int64(365*86400), "BeginTime", uint8(1))
	f.Fuzz(func(t *testing.T, start, preempt, end, submit int64, reason string, state uint8) {
		sec := func(n int64) time.Time {
			if n == 0 {
				return time.Time{}
			}
			return t0.Add(time.Duration(n%(1<<40)) * time.Second)
		}
		states := []slurm.JobState{slurm.JobPending, slurm.JobRunning, slurm.JobCompleting, "WEIRD"}
		j := tierJobAt(states[int(state)%len(states)], reason, func(j *slurm.QueuedJob) {
			j.Start, j.Preempt, j.End, j.Submit = sec(start), sec(preempt), sec(end), sec(submit)
		})
		v := computeView(viewInput{Tier: "fast", Asked: true, Mem: ranOnNode1, Partitions: parts, Now: t0, Cfg: outageCfg,
			Jobs: []slurm.QueuedJob{j}, Running: []slurm.QueuedJob{vasp("9", sec(preempt), sec(end))}})
		if v.ExpectedBack != nil && v.ExpectedBack.Before(t0) {
			t.Errorf("expected back %s, before now", v.ExpectedBack)
		}
		if v.RetryAfter < 1 || v.RetryAfter > 3600 {
			t.Errorf("Retry-After %d", v.RetryAfter)
		}
	})
}

// servingFile is a live, ready entry whose endpoint serves with less than
// its full shape.
func servingFile(serving string) endpoints.Decision {
	d := fileIn(endpoints.StateReady, "", t0.Add(-time.Minute))
	d.Live, d.Endpoint.Serving = true, serving
	return d
}
