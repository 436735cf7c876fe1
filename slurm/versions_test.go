package slurm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The lines in this file are what Slurm 20.11 to 25.11 print for each
// command this package reads, written from each release's source (SchedMD's
// repository, the tags below: the last of each series on 2026-11-27) and,
// for 22.05, checked against the lines captured on the local cluster
// (testdata/, queue_test.go). slurm/FACTS.md "Output across versions" lists
// what differs. Every case runs once per version, also where the format is
// the same in all of them, so that a version whose line stops parsing shows
// up by name.

// slurmVersion is a Slurm release series and the tag its lines come from.
type slurmVersion struct {
	name string // "22.05"
	tag  string // "slurm-22-05-8-1"
	// major*100+minor, to say "from 25.05 on" in a builder.
	n int
}

var slurmVersions = []slurmVersion{
	{"20.11", "slurm-20-11-9-1", 2011},
	{"22.05", "slurm-22-05-8-1", 2205},
	{"23.11", "slurm-23-11-11-1", 2311},
	{"24.11", "slurm-24-11-7-1", 2411},
	{"25.05", "slurm-25-05-8-1", 2505},
	{"25.11", "slurm-25-11-7-1", 2511},
}

// testOnlyLine builds sbatch --test-only's answer (stderr, through info(),
// hence "sbatch: "). Source: slurm_job_will_run in src/api/allocate.c.
// 20.11 to 24.11: "Job %u to start at %s using %u processors on nodes %s in
// partition %s". 25.05 and 25.11 (slurm-25-05-0-1 on; commit 843b248ee9,
// still so on master in 2026-08): "Job %u to start at %s%s%s a using …",
// the middle two " on cluster " and the cluster's name only with sbatch -M
// or in a federation, the " a" always. A preemption adds "  Preempts: %s".
func versionTestOnlyLine(v slurmVersion, cluster, preempts string) string {
	line := "sbatch: Job 727 to start at 2026-11-23T17:35:46"
	if v.n >= 2505 {
		if cluster != "" {
			line += " on cluster " + cluster
		}
		line += " a"
	}
	line += " using 4 processors on nodes node[2-3] in partition gpu_ai\n"
	if preempts != "" {
		line += "sbatch:   Preempts: " + preempts + "\n"
	}
	return line
}

func TestTestSubmitAcrossVersions(t *testing.T) {
	want := StartEstimate{JobID: "727", Start: time.Date(2026, 11, 23, 17, 35, 46, 0, time.UTC),
		Nodes: []string{"node2", "node3"}, Partition: "gpu_ai"}
	cases := []struct{ name, cluster, preempts string }{
		{name: "local cluster"},
		{name: "named cluster (sbatch -M, a federation)", cluster: "llm"},
		{name: "with jobs to preempt", preempts: "12,13"},
	}
	for _, v := range slurmVersions {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				var argv []string
				line := versionTestOnlyLine(v, tc.cluster, tc.preempts)
				c := &Client{Run: fakeSqueue(squeueReply{stderr: line}, &argv), Location: time.UTC}
				got, err := c.TestSubmit(context.Background(), "/s/fast.sbatch")
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s (%s) line %q (-want +got):\n%s", v.name, v.tag, line, d)
				}
			})
		}
	}
}

// showJobCase is one job as the builder below prints it.
type showJobCase struct {
	id, state, reason         string
	priority, restarts        int
	timeLimit                 string
	submit, eligible, start   string
	end                       string
	preempt                   string // "" when Slurm prints no PreemptTime (not started)
	nodes, batchHost          string
	tresAlloc                 string
	runTime                   string
	name, command, submitLine string
	comment                   string
}

// versionShowJob builds one line of `scontrol -o show job` as version v
// prints it, in the order of slurm_sprint_job_info (src/api/job_info.c,
// 20.11 to 23.11) or _sprint_job_info (src/scontrol/info_job.c, 24.11 on).
// The fields the package reads (JobId, JobName, JobState, Reason, Requeue,
// Restarts, ExitCode, TimeLimit, EligibleTime, StartTime, EndTime,
// PreemptTime, Partition, NodeList, BatchHost) have the same names and
// formats in all six; the versions differ in fields around them:
// Scheduler= from 22.05; ReqTRES=/AllocTRES= instead of TRES= from 23.11;
// Power= gone and OOMKillStep= added in 24.11; LicensesAlloc= from 25.05;
// SubmitLine= (the whole sbatch command line, spaces and all) in 25.11.
func versionShowJob(v slurmVersion, j showJobCase) string {
	var b strings.Builder
	f := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	f("JobId=%s JobName=%s UserId=llm(990) GroupId=llm(990) MCS_label=N/A ", j.id, j.name)
	f("Priority=%d Nice=0 Account=ai QOS=normal ", j.priority)
	f("JobState=%s Reason=%s Dependency=(null) ", j.state, j.reason)
	f("Requeue=1 Restarts=%d BatchFlag=1 Reboot=0 ExitCode=0:0 ", j.restarts)
	f("RunTime=%s TimeLimit=%s TimeMin=N/A ", j.runTime, j.timeLimit)
	f("SubmitTime=%s EligibleTime=%s AccrueTime=%s ", j.submit, j.eligible, j.eligible)
	f("StartTime=%s EndTime=%s Deadline=N/A ", j.start, j.end)
	if j.preempt != "" {
		f("PreemptEligibleTime=%s PreemptTime=%s ", j.start, j.preempt)
	}
	f("SuspendTime=None SecsPreSuspend=0 LastSchedEval=%s", j.start)
	if v.n >= 2205 {
		f(" Scheduler=Main")
	}
	f(" Partition=gpu_ai AllocNode:Sid=ctl:4242 ReqNodeList=(null) ExcNodeList=(null) NodeList=%s ", j.nodes)
	if j.batchHost != "" {
		f("BatchHost=%s ", j.batchHost)
	}
	f("NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* ")
	if v.n >= 2311 {
		f("ReqTRES=cpu=4,node=2,billing=4 AllocTRES=%s ", j.tresAlloc)
	} else {
		f("TRES=cpu=4,node=2,billing=4 ")
	}
	f("Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 ")
	f("Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) ")
	if v.n >= 2505 {
		f("LicensesAlloc=(null) ")
	}
	f("Network=(null) Command=%s ", j.command)
	if v.n >= 2511 {
		f("SubmitLine=%s ", j.submitLine)
	}
	f("WorkDir=/srv/llm Comment=%s StdErr=/srv/llm/slurm-%s.out StdIn=/dev/null StdOut=/srv/llm/slurm-%s.out ",
		j.comment, j.id, j.id)
	if v.n >= 2411 {
		f("OOMKillStep=0")
	} else {
		f("Power=")
	}
	return b.String()
}

func TestShowJobAcrossVersions(t *testing.T) {
	base := showJobCase{name: "llm-fast", command: "/srv/llm/tier fast.sbatch",
		submitLine: "sbatch --requeue --job-name=llm-fast -p gpu_ai /srv/llm/tier fast.sbatch",
		comment:    "tier JobState=RUNNING Reason=None", timeLimit: "1-00:00:00",
		submit: "2026-11-23T13:21:43", eligible: "2026-11-23T13:21:43", tresAlloc: "(null)", runTime: "00:00:00"}
	cases := []struct {
		name string
		job  func(showJobCase) showJobCase
		want JobInfo
	}{
		{name: "running, being preempted",
			job: func(j showJobCase) showJobCase {
				j.id, j.state, j.reason, j.priority = "256", "RUNNING", "None", 4294900403
				j.start, j.end, j.preempt = "2026-11-23T13:21:45", "2026-11-23T13:22:24", "2026-11-23T13:21:54"
				j.nodes, j.batchHost, j.tresAlloc, j.runTime = "node[1-2]", "node1", "cpu=4,node=2,billing=4", "00:00:09"
				return j
			},
			want: JobInfo{JobID: "256", JobName: "llm-fast", State: JobRunning, Reason: "None",
				PreemptTime: at("2026-11-23T13:21:54"), EligibleTime: at("2026-11-23T13:21:43"),
				StartTime: at("2026-11-23T13:21:45"), EndTime: at("2026-11-23T13:22:24"), TimeLimit: 24 * time.Hour,
				NodeList: "node[1-2]", BatchHost: "node1", Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		{name: "requeued, held on its begin time",
			job: func(j showJobCase) showJobCase {
				j.id, j.state, j.reason, j.priority, j.restarts = "256", "PENDING", "BeginTime", 4294900403, 1
				j.submit, j.eligible = "2026-11-23T13:21:46", "2026-11-23T13:23:47"
				j.start, j.end = "2026-11-23T13:23:47", "Unknown"
				return j
			},
			want: JobInfo{JobID: "256", JobName: "llm-fast", State: JobPending, Reason: "BeginTime", Restarts: 1,
				EligibleTime: at("2026-11-23T13:23:47"), StartTime: at("2026-11-23T13:23:47"), TimeLimit: 24 * time.Hour,
				Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
		// state_desc "launch failed requeued held" with its spaces made
		// '_' (slurm_sprint_job_info / _sprint_job_info, all versions).
		{name: "requeued and held after a failed launch",
			job: func(j showJobCase) showJobCase {
				j.id, j.state, j.reason, j.restarts = "256", "PENDING", "launch_failed_requeued_held", 1
				j.timeLimit, j.start, j.end = "UNLIMITED", "Unknown", "Unknown"
				return j
			},
			want: JobInfo{JobID: "256", JobName: "llm-fast", State: JobPending, Reason: "launch_failed_requeued_held",
				Restarts: 1, EligibleTime: at("2026-11-23T13:21:43"), Partition: "gpu_ai", Requeue: true, ExitCode: "0:0"}},
	}
	for _, v := range slurmVersions {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				line := versionShowJob(v, tc.job(base))
				var argv []string
				c := &Client{Location: utc, Run: fakeRunner(t, reply{stdout: line + "\n"}, &argv)}
				got, err := c.ShowJob(context.Background(), "256")
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("%s (%s) line %q (-want +got):\n%s", v.name, v.tag, line, d)
				}
			})
		}
	}
}

// versionNodeState is how version v prints a node's State= for the states
// the package must tell apart. 20.11 (src/api/node_info.c,
// slurm_sprint_node_table) prints node_state_string() of the base state,
// with "*" for not responding, then "+DRAIN", "+FAIL", "+COMPLETING"…:
// "IDLE*+DRAIN". 22.05 on print node_state_string_complete(): the base
// state then "+FLAG" for each flag, "+NOT_RESPONDING" instead of "*".
func versionNodeState(v slurmVersion, state string) string {
	if v.n >= 2205 {
		return state
	}
	old := map[string]string{
		"IDLE+NOT_RESPONDING":       "IDLE*",
		"IDLE+DRAIN+NOT_RESPONDING": "IDLE*+DRAIN",
		"DOWN+NOT_RESPONDING":       "DOWN*",
		"MIXED+COMPLETING":          "MIXED+COMPLETING",
	}
	if s, ok := old[state]; ok {
		return s
	}
	return state
}

// versionShowNode builds one line of `scontrol -o show node` (the fields
// read: NodeName, NodeAddr, State, the same in all six versions; the
// source is src/api/node_info.c in all of them).
func versionShowNode(v slurmVersion, name, addr, state string) string {
	return fmt.Sprintf("NodeName=%s Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.01 "+
		"AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=%s NodeHostName=%s Version=%s "+
		"OS=Linux 4.18.0-553.el8_10.x86_64 #1 SMP Fri May 10 15:19:13 UTC 2024  RealMemory=4000 AllocMem=0 FreeMem=3000 "+
		"Sockets=2 Boards=1 State=%s ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu_ai,gpu_vasp  "+
		"BootTime=2026-11-21T23:46:07 SlurmdStartTime=2026-11-21T23:50:14 LastBusyTime=2026-11-21T23:55:09 "+
		"CfgTRES=cpu=2,mem=4000M,billing=2 AllocTRES= CurrentWatts=0 AveWatts=0",
		name, addr, name, v.name+".1", versionNodeState(v, state))
}

func TestShowNodeAcrossVersions(t *testing.T) {
	cases := []struct {
		name  string
		state string // as 22.05 on print it
		down  bool
	}{
		{name: "idle", state: "IDLE"},
		{name: "allocated and draining", state: "ALLOCATED+DRAIN"},
		{name: "mixed, completing", state: "MIXED+COMPLETING"},
		{name: "not responding", state: "IDLE+NOT_RESPONDING", down: true},
		// 20.11's "IDLE*+DRAIN": the '*' is not at the end.
		{name: "not responding and drained", state: "IDLE+DRAIN+NOT_RESPONDING", down: true},
		{name: "down", state: "DOWN+NOT_RESPONDING", down: true},
		{name: "failing", state: "ALLOCATED+FAIL", down: true},
	}
	for _, v := range slurmVersions {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				out := versionShowNode(v, "node1", "10.1.0.11", tc.state) + "\n" +
					versionShowNode(v, "node2", "10.1.0.12", "IDLE") + "\n"
				var argv []string
				c := &Client{Run: fakeRunner(t, reply{stdout: out}, &argv)}
				addrs, err := c.NodeAddrs(context.Background(), []string{"node1", "node2"})
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if d := cmp.Diff(map[string]string{"node1": "10.1.0.11", "node2": "10.1.0.12"}, addrs); d != "" {
					t.Errorf("%s (%s) NodeAddrs (-want +got):\n%s", v.name, v.tag, d)
				}
				down, err := c.NodesDown(context.Background(), []string{"node1", "node2"})
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if down != tc.down {
					t.Errorf("%s (%s) State=%s: NodesDown = %v, want %v", v.name, v.tag, versionNodeState(v, tc.state), down, tc.down)
				}
			})
		}
	}
}

// versionShowPartition builds `scontrol -o show partition` for two
// partitions. PartitionName=, Nodes= and PriorityTier= are printed alike in
// all six versions (slurm_sprint_partition_info, src/api/partition_info.c);
// fields around them came (NodeSets= 22.05, MaxCPUsPerSocket= and
// PowerDownOnIdle= 23.11, ExclusiveTopo= 24.11, Topology= 25.05).
func versionShowPartition(v slurmVersion) string {
	part := func(name string, tier int, extra string) string {
		return fmt.Sprintf("PartitionName=%s AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "+
			"DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=30 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED "+
			"MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED%s Nodes=node[1-3] PriorityJobFactor=1 PriorityTier=%d RootOnly=NO "+
			"ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=REQUEUE State=UP TotalCPUs=6 TotalNodes=3 "+
			"SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=6,node=3,billing=6\n",
			name, extra, tier)
	}
	extra := ""
	if v.n >= 2311 {
		extra = " MaxCPUsPerSocket=UNLIMITED"
	}
	return part("gpu_ai", 1, extra) + part("gpu_vasp", 10, extra)
}

func TestShowPartitionAcrossVersions(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	want := map[string]Partition{
		"gpu_ai":   {Name: "gpu_ai", PriorityTier: 1, Nodes: nodes},
		"gpu_vasp": {Name: "gpu_vasp", PriorityTier: 10, Nodes: nodes},
	}
	for _, v := range slurmVersions {
		t.Run(v.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, reply{stdout: versionShowPartition(v)}, &argv)}
			got, err := c.Partitions(context.Background())
			if err != nil {
				t.Fatalf("%s (%s): %v", v.name, v.tag, err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s (%s) (-want +got):\n%s", v.name, v.tag, d)
			}
		})
	}
}

// The squeue lines are the same in all six versions: the -O field names
// the package asks for (JobID, State, Reason, SubmitTime, EligibleTime,
// StartTime, EndTime, PreemptTime, PriorityLong, RestartCnt, UserID,
// Partition, NodeList, Name) are matched without regard to case in all of
// them (xstrcasecmp: a chain in _parse_long_format, src/squeue/opts.c, to
// 23.11; the fmt_data_job table from 24.11), ":|" is read by the same
// _parse_long_token, and the print functions (_print_str, _print_time,
// _print_job_reason …, src/squeue/print.c) print the same text (only
// struct fields were renamed; _print_time's buffer grew from 32 to 256
// bytes in 23.11). The -o letters %i %T %U %j and -s %i map to the same
// functions. So the captured 22.05.8 lines stand for every version, plus
// the requeue holds written from the source: Reason is state_desc as is,
// spaces kept ("launch failed requeued held", job_mgr.c _job_requeue_op
// in 20.11–23.11, _job_requeue_op/_requeue_job in 24.11 on), priority 0.
func TestQueueAcrossVersions(t *testing.T) {
	cases := []struct {
		name   string
		line   string
		reason string
		held   bool
	}{
		{name: "running", line: qRunning, reason: "None"},
		{name: "requeued, begin time", line: qBeginTime, reason: "BeginTime"},
		{name: "held by an admin", line: qHeldAdmin, reason: "JobHeldAdmin", held: true},
		{name: "requeue-held (scontrol requeuehold)",
			line:   "256|PENDING|job requeued in held state|2026-11-23T13:21:46|2026-11-23T13:21:46|N/A|NONE|N/A|0|1|990|gpu_ai||llm-fast",
			reason: "job requeued in held state", held: true},
		{name: "held after a failed launch",
			line:   "256|PENDING|launch failed requeued held|2026-11-23T13:21:46|2026-11-23T13:21:46|N/A|NONE|N/A|0|1|990|gpu_ai||llm-fast",
			reason: "launch failed requeued held", held: true},
	}
	for _, v := range slurmVersions {
		for _, tc := range cases {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				jobs, err := parseQueue(tc.line+"\n", time.UTC)
				if err != nil {
					t.Fatalf("%s (%s): %v", v.name, v.tag, err)
				}
				if len(jobs) != 1 || jobs[0].ID != "256" || jobs[0].Reason != tc.reason || jobs[0].Held() != tc.held {
					t.Errorf("%s (%s): %+v, want job 256 reason %q held %v", v.name, v.tag, jobs, tc.reason, tc.held)
				}
			})
		}
	}
}

// squeue -o "%i %T", "%i %T %U %j" and -s -o %i, and sbatch --parsable:
// the same in all six versions (src/squeue/print.c as above; sbatch.c
// main: printf("%u") then ";%s" with the cluster's name only under -M).
func TestShortFormatsAcrossVersions(t *testing.T) {
	for _, v := range slurmVersions {
		t.Run(v.name, func(t *testing.T) {
			ctx := context.Background()
			var argv []string
			c := &Client{Run: fakeRunner(t, reply{stdout: "256 RUNNING\n257 PENDING\n"}, &argv)}
			states, err := c.JobStates(ctx, []string{"256", "257"})
			if err != nil || !cmp.Equal(states, map[string]JobState{"256": JobRunning, "257": JobPending}) {
				t.Errorf("%s (%s) JobStates = %v, %v", v.name, v.tag, states, err)
			}
			c.Run = fakeRunner(t, reply{stdout: "256 RUNNING 990 llm fast\n"}, &argv)
			details, err := c.JobDetails(ctx, []string{"256"})
			if err != nil || !cmp.Equal(details, map[string]JobDetail{"256": {State: JobRunning, UID: 990, Name: "llm fast"}}) {
				t.Errorf("%s (%s) JobDetails = %v, %v", v.name, v.tag, details, err)
			}
			c.Run = fakeRunner(t, reply{stdout: "256.batch\n256.extern\n256.0\n"}, &argv)
			steps, err := c.Steps(ctx, "256")
			if err != nil || !cmp.Equal(steps, []string{"256.batch", "256.extern", "256.0"}) {
				t.Errorf("%s (%s) Steps = %v, %v", v.name, v.tag, steps, err)
			}
			for _, out := range []string{"258\n", "258;llm\n"} {
				c.Run = fakeRunner(t, reply{stdout: out}, &argv)
				if id, err := c.Submit(ctx, "/s/fast.sbatch"); err != nil || id != "258" {
					t.Errorf("%s (%s) Submit printing %q = %q, %v", v.name, v.tag, out, id, err)
				}
			}
		})
	}
}
