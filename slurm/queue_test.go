package slurm

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Lines captured on the local cluster (Slurm 22.05.8, 2026-11-23) with
// Queue's -O format: job 256 (gpu_ai, "probe job") running, requeued
// (COMPLETING, then PENDING BeginTime), held by root, released, running
// again and being preempted; job 257 (gpu_vasp -t 2) pending without and
// then with a start estimate.
const (
	qRunning    = "256|RUNNING|None|2026-11-23T13:21:43|2026-11-23T13:21:43|2026-11-23T13:21:45|NONE|N/A|4294900403|0|0|gpu_ai|node1|probe job"
	qCompleting = "256|COMPLETING|None|2026-11-23T13:21:43|2026-11-23T13:21:43|2026-11-23T13:21:46|NONE|N/A|4294900403|1|0|gpu_ai|node1|probe job"
	qBeginTime  = "256|PENDING|BeginTime|2026-11-23T13:21:46|2026-11-23T13:23:47|2026-11-23T13:23:47|NONE|N/A|4294900403|1|0|gpu_ai||probe job"
	qHeldAdmin  = "256|PENDING|JobHeldAdmin|2026-11-23T13:21:46|2026-11-23T13:23:47|2026-11-23T13:23:47|NONE|N/A|0|1|0|gpu_ai||probe job"
	qPreempted  = "256|RUNNING|None|2026-11-23T13:21:46|2026-11-23T13:21:49|2026-11-23T13:21:50|2026-11-23T13:22:24|2026-11-23T13:21:54|4294900402|1|0|gpu_ai|node1|probe job"
	qNoEstimate = "257|PENDING|Resources|2026-11-23T13:21:53|2026-11-23T13:21:53|N/A|N/A|N/A|4294900401|0|0|gpu_vasp||vasp-probe"
	qEstimate   = "257|PENDING|Resources|2026-11-23T13:21:53|2026-11-23T13:21:53|2026-11-23T13:22:39|2026-11-23T13:24:39|N/A|4294900401|0|0|gpu_vasp||vasp-probe"
)

func qat(hms string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", "2026-11-23T"+hms, time.UTC)
	if err != nil {
		panic(err)
	}
	return t
}

func TestQueueParsesCapturedLines(t *testing.T) {
	tests := []struct {
		name string
		line string
		want QueuedJob
		held bool
	}{
		{name: "running", line: qRunning, want: QueuedJob{ID: "256", State: JobRunning, Reason: "None",
			Submit: qat("13:21:43"), Eligible: qat("13:21:43"), Start: qat("13:21:45"), Priority: 4294900403,
			Partition: "gpu_ai", NodeList: "node1", Name: "probe job"}},
		{name: "completing after a requeue: SubmitTime not rewritten yet", line: qCompleting, want: QueuedJob{ID: "256",
			State: JobCompleting, Reason: "None", Submit: qat("13:21:43"), Eligible: qat("13:21:43"), Start: qat("13:21:46"),
			Priority: 4294900403, Restarts: 1, Partition: "gpu_ai", NodeList: "node1", Name: "probe job"}},
		{name: "requeued, held on BeginTime for 121 s", line: qBeginTime, want: QueuedJob{ID: "256", State: JobPending,
			Reason: "BeginTime", Submit: qat("13:21:46"), Eligible: qat("13:23:47"), Start: qat("13:23:47"),
			Priority: 4294900403, Restarts: 1, Partition: "gpu_ai", Name: "probe job"}},
		{name: "held by an admin: priority 0", line: qHeldAdmin, held: true, want: QueuedJob{ID: "256", State: JobPending,
			Reason: "JobHeldAdmin", Submit: qat("13:21:46"), Eligible: qat("13:23:47"), Start: qat("13:23:47"),
			Restarts: 1, Partition: "gpu_ai", Name: "probe job"}},
		{name: "being preempted: PreemptTime and EndTime set", line: qPreempted, want: QueuedJob{ID: "256", State: JobRunning,
			Reason: "None", Submit: qat("13:21:46"), Eligible: qat("13:21:49"), Start: qat("13:21:50"), End: qat("13:22:24"),
			Preempt: qat("13:21:54"), Priority: 4294900402, Restarts: 1, Partition: "gpu_ai", NodeList: "node1", Name: "probe job"}},
		{name: "pending, no estimate yet", line: qNoEstimate, want: QueuedJob{ID: "257", State: JobPending, Reason: "Resources",
			Submit: qat("13:21:53"), Eligible: qat("13:21:53"), Priority: 4294900401, Partition: "gpu_vasp", Name: "vasp-probe"}},
		{name: "pending with an estimate and an end by its time limit", line: qEstimate, want: QueuedJob{ID: "257",
			State: JobPending, Reason: "Resources", Submit: qat("13:21:53"), Eligible: qat("13:21:53"), Start: qat("13:22:39"),
			End: qat("13:24:39"), Priority: 4294900401, Partition: "gpu_vasp", Name: "vasp-probe"}},
		{name: "unreadable times are unknown, not an error", line: "9|PENDING|Resources|yesterday|2026-13-40T99:00:00|soon|NONE|Unknown|1|0|0|a,b||x|y",
			want: QueuedJob{ID: "9", State: JobPending, Reason: "Resources", Priority: 1, Partition: "a", Name: "x|y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseQueue(tt.line+"\n", time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]QueuedJob{tt.want}, got); d != "" {
				t.Errorf("job (-want +got):\n%s", d)
			}
			if got[0].Held() != tt.held {
				t.Errorf("Held() = %v, want %v", got[0].Held(), tt.held)
			}
		})
	}
}

func TestQueueRefusesWhatItCannotRead(t *testing.T) {
	for name, out := range map[string]string{
		"too few fields":         "256|RUNNING|None\n",
		"uid not numeric":        "256|RUNNING|None|||||N/A|1|0|alice|gpu_ai|node1|x\n",
		"restarts":               "256|RUNNING|None|||||N/A|1|x|0|gpu_ai|node1|x\n",
		"priority":               "256|RUNNING|None|||||N/A|high|0|0|gpu_ai|node1|x\n",
		"no id":                  "|RUNNING|None|||||N/A|1|0|0|gpu_ai|node1|x\n",
		"one good line, one bad": qRunning + "\n256|RUNNING\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := parseQueue(out, time.UTC); err == nil {
				t.Errorf("parseQueue(%q) = %+v, want an error", out, got)
			}
		})
	}
}

func TestQueueArgvAndErrors(t *testing.T) {
	var argv []string
	c := &Client{Run: fakeSqueue(squeueReply{stdout: qBeginTime + "\n" + qRunning + "\n"}, &argv), Location: time.UTC}
	got, err := c.Queue(context.Background(), QueueQuery{Names: []string{"llm-fast", "llm-reasoning"}, User: "slurm-llm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Reason != "BeginTime" {
		t.Errorf("jobs %+v", got)
	}
	want := []string{"squeue", "-h", "-n", "llm-fast,llm-reasoning", "-u", "slurm-llm", "-O",
		"JobID:|,State:|,Reason:|,SubmitTime:|,EligibleTime:|,StartTime:|,EndTime:|,PreemptTime:|,PriorityLong:|,RestartCnt:|,UserID:|,Partition:|,NodeList:|,Name:"}
	if d := cmp.Diff(want, argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	c = &Client{Run: fakeSqueue(squeueReply{}, &argv)}
	if _, err := c.Queue(context.Background(), QueueQuery{States: []string{"RUNNING"}}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"squeue", "-h", "-t", "RUNNING", "-O"}, argv[:5]); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	c = &Client{Run: fakeSqueue(squeueReply{stderr: "squeue: error: Unable to contact slurm controller (connect failure)", exit: 1}, &argv)}
	if _, err := c.Queue(context.Background(), QueueQuery{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("controller down: error %v, want ErrUnavailable", err)
	}
}

func TestPartitions(t *testing.T) {
	b, err := os.ReadFile("testdata/show-partition.txt")
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	c := &Client{Run: fakeSqueue(squeueReply{stdout: string(b)}, &argv)}
	got, err := c.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"node1", "node2", "node3"}
	want := map[string]Partition{"gpu_ai": {Name: "gpu_ai", PriorityTier: 1, Nodes: nodes},
		"gpu_vasp": {Name: "gpu_vasp", PriorityTier: 10, Nodes: nodes}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("partitions (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"scontrol", "-o", "show", "partition"}, argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
	c = &Client{Run: fakeSqueue(squeueReply{stdout: "PartitionName=x PriorityTier=high\n"}, &argv)}
	if _, err := c.Partitions(context.Background()); err == nil {
		t.Error("unreadable PriorityTier: want an error")
	}
	c = &Client{Run: fakeSqueue(squeueReply{stdout: "PartitionName=x PriorityTier=1 Nodes=n[1-\n"}, &argv)}
	if _, err := c.Partitions(context.Background()); err == nil {
		t.Error("unreadable Nodes: want an error")
	}
}

// FuzzParseQueue: squeue's output is another program's; whatever it prints,
// parsing never panics, and what it accepts has an id and a state.
func FuzzParseQueue(f *testing.F) {
	for _, s := range []string{qRunning, qBeginTime, qHeldAdmin, qEstimate, "|||", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		jobs, err := parseQueue(out, time.UTC)
		if err != nil {
			return
		}
		for _, j := range jobs {
			if j.ID == "" || j.State == "" {
				t.Errorf("accepted a job without id or state: %+v", j)
			}
		}
	})
}

func TestJobStateQueued(t *testing.T) {
	for s, want := range map[JobState]bool{JobPending: true, JobRequeued: true, "REQUEUE_HOLD": true, "REQUEUE_FED": true,
		JobRunning: false, JobCompleting: false, JobSignaling: false, JobCancelled: false, "": false} {
		if got := s.Queued(); got != want {
			t.Errorf("%q.Queued() = %v, want %v", s, got, want)
		}
	}
}
