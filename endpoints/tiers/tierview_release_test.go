package tiers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/slurm"
)

// Issue 27: a requeued tier job waits on Slurm's requeue hold (BeginTime,
// 121 s), which the keeper lifts about a second later; its preemptor (a
// science job) has no time limit. The view gave no estimate then, so a
// stream cut by the drain's deadline found "no hold: no estimate". It now
// gives the keeper's release + the measured start-to-ready, while a node
// the job fits on is free.
func TestComputeViewKeeperRelease(t *testing.T) {
	// The keeper as shipped: release_delay 1 s + release_interval 1 s.
	releasing := keeperTier{Known: true, Enabled: true, By: "config", Release: true,
		ReleaseWithin: 2 * time.Second, RequeueHoldMax: 125 * time.Second}
	withNodes := map[string]slurm.Partition{
		"gpu_ai":   {Name: "gpu_ai", PriorityTier: 1, Nodes: []string{"node1", "node2", "node3"}},
		"gpu_vasp": {Name: "gpu_vasp", PriorityTier: 10, Nodes: []string{"node1", "node2", "node3"}}}
	// requeued is job 7 held by the requeue of t0-1s (SubmitTime), eligible 121 s later.
	requeued := func(change func(*slurm.QueuedJob)) []slurm.QueuedJob {
		return []slurm.QueuedJob{tierJobAt(slurm.JobPending, "BeginTime", func(j *slurm.QueuedJob) {
			j.Submit = t0.Add(-time.Second)
			j.Eligible = j.Submit.Add(121 * time.Second)
			j.Start = j.Eligible
			if change != nil {
				change(j)
			}
		})}
	}
	science := []slurm.QueuedJob{vasp("9", t0.Add(-40*time.Second), time.Time{})} // on node1, no time limit
	preemptor := &Preemptor{Job: "9", Name: "vasp", Partition: "gpu_vasp"}
	tests := []struct {
		name string
		in   viewInput
		want TierView // Tier, Job, JobState, StartToReady and ReadySamples are filled in
	}{
		{name: "two nodes free: back at the keeper's release + the median",
			in:   viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Running: science, Jobs: requeued(nil)},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, ExpectedBack: tp(t0.Add(21 * time.Second)), RetryAfter: 10}},
		{name: "the same before the keeper's release is due: the same time (it does not move with the clock)",
			in: viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Running: science,
				Jobs: requeued(func(j *slurm.QueuedJob) { j.Submit, j.Eligible = t0, t0.Add(121*time.Second) })},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, ExpectedBack: tp(t0.Add(22 * time.Second)), RetryAfter: 10}},
		{name: "every node taken: no estimate",
			in: viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Jobs: requeued(nil),
				Running: []slurm.QueuedJob{func() slurm.QueuedJob {
					j := vasp("9", t0.Add(-40*time.Second), time.Time{})
					j.NodeList = "node[1-3]"
					return j
				}()}},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, RetryAfter: 30}},
		{name: "a tier of three nodes, two free: no estimate",
			in: viewInput{Keeper: releasing, Partitions: withNodes, Running: science, Jobs: requeued(nil),
				Mem: func() tierMem { m := ranOnNode1; m.Nodes = "node[1-3]"; return m }()},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, RetryAfter: 30}},
		{name: "the running jobs not asked: no estimate",
			in:   viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Jobs: requeued(nil)},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", RetryAfter: 30}},
		{name: "the job never seen running (its nodes unknown): no estimate",
			in: viewInput{Keeper: releasing, Partitions: withNodes, Running: science, Jobs: requeued(nil),
				Mem: func() tierMem { m := ranOnNode1; m.NodesJob = "6"; return m }()},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", RetryAfter: 30}},
		{name: "never measured from start to routed: no estimate",
			in: viewInput{Keeper: releasing, Partitions: withNodes, Running: science, Jobs: requeued(nil),
				Mem: func() tierMem { m := ranOnNode1; m.Ready = nil; return m }()},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, RetryAfter: 30}},
		{name: "the keeper does not release: Slurm's hold is the estimate",
			in:   viewInput{Mem: ranOnNode1, Partitions: withNodes, Running: science, Jobs: requeued(nil)},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, ExpectedBack: tp(t0.Add(140 * time.Second)), RetryAfter: 120}},
		{name: "begin time deferred beyond Slurm's hold (the keeper leaves it): Slurm's estimate",
			in: viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Running: science,
				Jobs: requeued(func(j *slurm.QueuedJob) { j.Eligible = t0.Add(10 * time.Minute); j.Start = j.Eligible })},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, ExpectedBack: tp(t0.Add(10*time.Minute + 20*time.Second)), RetryAfter: 600}},
		{name: "released long ago and not started (the keeper or a node is not what the view thinks): overdue",
			in: viewInput{Keeper: releasing, Mem: ranOnNode1, Partitions: withNodes, Running: science,
				Jobs: requeued(func(j *slurm.QueuedJob) { j.Submit, j.Eligible = t0.Add(-time.Minute), t0.Add(time.Minute) })},
			want: TierView{Reason: ReasonPreempted, JobReason: "BeginTime", Preemptor: preemptor, RetryAfter: 10, Overdue: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Tier, in.Now, in.Cfg, in.Asked = "fast", t0, outageCfg, true
			got := computeView(in)
			want := tt.want
			want.Tier, want.State, want.Job, want.JobState = "fast", StateDown, "7", "PENDING"
			want.StartToReady, want.ReadySamples = in.Mem.medianReady(), len(in.Mem.Ready)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("view (-want +got):\n%s", d)
			}
		})
	}
}
