package slurm

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var utc = time.UTC

func at(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, utc)
	if err != nil {
		panic(err)
	}
	return t
}

// The testdata files were captured from `scontrol -o show job` on the local
// 3-node cluster (Slurm 22.05.8).
func TestShowJob(t *testing.T) {
	tests := []struct {
		file string
		want JobInfo
	}{
		{file: "show-job-running.txt", want: JobInfo{JobID: "4", JobName: "tier-x", State: JobRunning, Reason: "None",
			EligibleTime: at("2026-11-21T23:51:08"), StartTime: at("2026-11-21T23:51:08"), EndTime: at("2026-11-22T00:01:08"),
			TimeLimit: 10 * time.Minute, NodeList: "node[1-2]", BatchHost: "node1", Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		{file: "show-job-pending.txt", want: JobInfo{JobID: "5", JobName: "pend", State: JobPending, Reason: "Resources",
			EligibleTime: at("2026-11-21T23:51:19"), Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		{file: "show-job-requeued.txt", want: JobInfo{JobID: "6", JobName: "unl", State: JobPending, Reason: "BeginTime", Restarts: 1,
			EligibleTime: at("2026-11-21T23:53:23"), StartTime: at("2026-11-21T23:53:23"), Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		{file: "show-job-preempted.txt", want: JobInfo{JobID: "25", JobName: "ai-tier", State: JobSignaling, Reason: "None",
			PreemptTime: at("2026-11-21T23:59:33"), EligibleTime: at("2026-11-21T23:59:29"), StartTime: at("2026-11-21T23:59:30"),
			NodeList: "node[1-3]", BatchHost: "node1", Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		{file: "show-job-unlimited.txt", want: JobInfo{JobID: "6", JobName: "unl", State: JobRunning, Reason: "None",
			EligibleTime: at("2026-11-21T23:51:21"), StartTime: at("2026-11-21T23:51:21"),
			NodeList: "node1", BatchHost: "node1", Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var argv []string
			c := &Client{Location: utc, Run: fakeRunner(t, reply{stdout: readTestdata(t, tt.file)}, &argv)}
			got, err := c.ShowJob(context.Background(), tt.want.JobID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ShowJob (-want +got):\n%s", d)
			}
		})
	}
}

func TestShowJobFinished(t *testing.T) {
	tests := []struct {
		file  string
		state JobState
	}{
		{file: "show-job-completed.txt", state: JobCompleted},
		{file: "show-job-cancelled.txt", state: JobCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, reply{stdout: readTestdata(t, tt.file)}, &argv)}
			got, err := c.ShowJob(context.Background(), "x")
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tt.state || got.EndTime.IsZero() {
				t.Errorf("ShowJob = state %q end %v, want %q and an end time", got.State, got.EndTime, tt.state)
			}
		})
	}
}

func TestParseKeyValues(t *testing.T) {
	line := readTestdata(t, "show-job-running.txt")
	f := parseKeyValues(line)
	want := map[string]string{
		"Command":       "/tmp/dir with space/my job.sh arg1 arg 2",
		"Comment":       "a comment with spaces=and equals",
		"Power":         "",
		"TRES":          "cpu=2,node=2,billing=2",
		"AllocNode:Sid": "localhost:3071",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
	// A value that repeats a key cannot override the real field.
	f = parseKeyValues("JobId=1 JobState=RUNNING Comment=x JobState=COMPLETED")
	if f["JobState"] != "RUNNING" {
		t.Errorf("JobState = %q; a later repeat overrode it", f["JobState"])
	}
}

func TestParseTimeLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "UNLIMITED", want: 0},
		{in: "00:10:00", want: 10 * time.Minute},
		{in: "2-03:04:05", want: 51*time.Hour + 4*time.Minute + 5*time.Second},
		{in: "10:00", wantErr: true},
		{in: "x-00:00:00", wantErr: true},
		{in: "00:aa:00", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTimeLimit(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseTimeLimit(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestShowJobErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  string
	}{
		{name: "unknown job", reply: reply{stderr: invalidJob, exit: 1}, want: "no such job"},
		{name: "controller down", reply: reply{stderr: contactFailure, exit: 1}, want: "unavailable"},
		{name: "empty output", reply: reply{}, want: "other"},
		{name: "garbage", reply: reply{stdout: "hello world\n"}, want: "other"},
		{name: "bad restarts", reply: reply{stdout: "JobId=1 Restarts=x TimeLimit=UNLIMITED\n"}, want: "other"},
		{name: "bad time", reply: reply{stdout: "JobId=1 Restarts=0 StartTime=yesterday\n"}, want: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, tt.reply, &argv)}
			_, err := c.ShowJob(context.Background(), "1")
			if got := errKind(err); got != tt.want {
				t.Errorf("ShowJob error %v is %q, want %q", err, got, tt.want)
			}
		})
	}
}

func TestJobStates(t *testing.T) {
	tests := []struct {
		name     string
		reply    reply
		want     map[string]JobState
		wantKind string
	}{
		{name: "mix", reply: reply{stdout: "4 RUNNING\n6 PENDING\n1 COMPLETED\n"},
			want: map[string]JobState{"4": JobRunning, "6": JobPending, "1": JobCompleted}},
		{name: "several unknown ids: empty output", reply: reply{}, want: map[string]JobState{}},
		{name: "one unknown id: squeue fails, still all gone", reply: reply{stderr: invalidJob, exit: 1}, want: map[string]JobState{}},
		{name: "controller down", reply: reply{stderr: contactFailure, exit: 1}, wantKind: "unavailable"},
		{name: "other failure", reply: reply{stderr: "squeue: error: something", exit: 1}, wantKind: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, tt.reply, &argv)}
			got, err := c.JobStates(context.Background(), []string{"4", "6", "1"})
			if kind := errKind(err); kind != tt.wantKind {
				t.Fatalf("JobStates error %v is %q, want %q", err, kind, tt.wantKind)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("JobStates (-want +got):\n%s", d)
			}
		})
	}
}

func TestJobStatesNoIDsAsksNothing(t *testing.T) {
	c := &Client{Run: func(context.Context, []string) ([]byte, []byte, error) {
		t.Fatal("squeue run for no ids")
		return nil, nil, nil
	}}
	got, err := c.JobStates(context.Background(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("JobStates(nil) = %v, %v", got, err)
	}
}

func TestSubmit(t *testing.T) {
	tests := []struct {
		name    string
		stdout  string
		want    string
		wantErr bool
	}{
		{name: "plain", stdout: "12\n", want: "12"},
		{name: "with cluster", stdout: "12;test\n", want: "12"},
		{name: "empty", stdout: "", wantErr: true},
		{name: "junk", stdout: "Submitted batch job 12\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, reply{stdout: tt.stdout}, &argv)}
			got, err := c.Submit(context.Background(), "x.sbatch")
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Submit = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  string
	}{
		{name: "done", reply: reply{}, want: ""},
		{name: "step already gone", reply: reply{stderr: "scancel: error: Kill job error on job step id 9.3: Invalid job id specified", exit: 1}, want: ""},
		{name: "controller down", reply: reply{stderr: "scancel: error: Kill job error on job id 9: Unable to contact slurm controller (connect failure)", exit: 8}, want: "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, tt.reply, &argv)}
			if got := errKind(c.Cancel(context.Background(), "9.3")); got != tt.want {
				t.Errorf("Cancel error kind %q, want %q", got, tt.want)
			}
		})
	}
}

func TestJobsByNameAndSteps(t *testing.T) {
	var argv []string
	c := &Client{Run: fakeRunner(t, reply{stdout: "7 RUNNING\n9 PENDING\n"}, &argv)}
	refs, err := c.JobsByName(context.Background(), "tier")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]JobRef{{ID: "7", State: JobRunning}, {ID: "9", State: JobPending}}, refs); d != "" {
		t.Errorf("JobsByName (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"squeue", "-h", "-n", "tier", "-o", "%i %T"}, argv); d != "" {
		t.Errorf("JobsByName argv (-want +got):\n%s", d)
	}
	c = &Client{User: "slurm-llm", Run: fakeRunner(t, reply{stdout: "7 RUNNING\n"}, &argv)}
	if _, err := c.JobsByName(context.Background(), "tier"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"squeue", "-h", "-n", "tier", "-o", "%i %T", "-u", "slurm-llm"}, argv); d != "" {
		t.Errorf("JobsByName argv with User (-want +got):\n%s", d)
	}
	c = &Client{Run: fakeRunner(t, reply{stdout: "8.0\n8.1\n8.batch\n"}, &argv)}
	steps, err := c.Steps(context.Background(), "8")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"8.0", "8.1", "8.batch"}, steps); d != "" {
		t.Errorf("Steps (-want +got):\n%s", d)
	}
}

func TestNodeAddrs(t *testing.T) {
	var argv []string
	c := &Client{Run: fakeRunner(t, reply{stdout: readTestdata(t, "show-node.txt")}, &argv)}
	got, err := c.NodeAddrs(context.Background(), []string{"node1", "node3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node1": "127.0.0.1", "node3": "127.0.0.1"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NodeAddrs (-want +got):\n%s", d)
	}
	c = &Client{Run: fakeRunner(t, reply{stdout: readTestdata(t, "show-node.txt")}, &argv)}
	if _, err := c.NodeAddrs(context.Background(), []string{"node1", "node9"}); err == nil {
		t.Error("NodeAddrs with a node scontrol did not list: no error")
	}
}
