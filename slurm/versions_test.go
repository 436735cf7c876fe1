package slurm

import (
	"context"
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
