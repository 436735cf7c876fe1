//go:build e2e

package slurm

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestE2ETestSubmit checks FACTS.md R10 on the real slurmctld: sbatch
// --test-only answers (on stderr, exit 0) with a job id, a start time, the
// nodes and the partition, queues nothing, and uses the job id up: the next
// real submit gets a larger one.
func TestE2ETestSubmit(t *testing.T) {
	c := &Client{}
	ctx := context.Background()
	dir := t.TempDir()
	script := filepath.Join(dir, "probe.sh")
	if err := os.WriteFile(script, []byte("#!/bin/bash\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	name := "slurm-e2e-testonly"
	before := time.Now().Add(-time.Second)
	est, err := c.TestSubmit(ctx, script, "-N1", "-p", "gpu_ai", "-J", name, "-o", "/dev/null", "-D", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("estimate: %+v", est)
	if est.Partition != "gpu_ai" || len(est.Nodes) != 1 || est.Start.Before(before.Truncate(time.Second)) || est.JobID == "" {
		t.Errorf("estimate %+v: want partition gpu_ai, one node, a start from now on, a job id", est)
	}
	if jobs, err := c.JobsByName(ctx, name); err != nil || len(jobs) != 0 {
		t.Errorf("after --test-only, jobs named %s: %v (error %v); want none", name, jobs, err)
	}
	id := submitSleeper(t, c, dir, "")
	tested, _ := strconv.Atoi(est.JobID)
	next, _ := strconv.Atoi(id)
	if next <= tested {
		t.Errorf("the submit after --test-only got job %d, the test %d: want a larger id (the test used it up)", next, tested)
	}
}
