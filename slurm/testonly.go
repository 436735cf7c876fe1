package slurm

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// StartEstimate is what `sbatch --test-only` says of a job that was not
// submitted: when Slurm would start it, on which nodes, in which
// partition. Slurm works it out from the nodes and the running jobs as
// they are now (slurm/FACTS.md T1).
type StartEstimate struct {
	// JobID is the id Slurm would have given the job (none is used up).
	JobID string
	// Start is when Slurm would start the job (whole seconds).
	Start time.Time
	// Nodes are the nodes it would run on, expanded.
	Nodes []string
	// Partition is the partition it would run in.
	Partition string
}

// testOnlyLine is sbatch --test-only's answer on stderr. Slurm 20.11 to
// 24.11 print "sbatch: Job 722 to start at 2026-11-23T17:35:43 using 1
// processors on nodes node1 in partition gpu_ai" (measured on 22.05.8).
// From 25.05 the format is "Job %u to start at %s%s%s a using …" (source:
// slurm_job_will_run in src/api/allocate.c, slurm-25-05-0-1 to
// slurm-25-11-7-1): " on cluster C" when a cluster is named (sbatch -M,
// a federation), then a stray " a" that is printed always. Both optional
// parts are taken, so every version's line parses (slurm/FACTS.md V1).
var testOnlyLine = regexp.MustCompile(`Job (\S+) to start at (\S+)(?: on cluster \S+)?(?: a)? using \d+ processors on nodes (\S+) in partition (\S+)`)

// TestSubmit asks Slurm when a job of script with sbatchArgs would start,
// without submitting it (`sbatch --test-only [sbatchArgs...] script`).
// Slurm refusing the job (no such partition, more nodes than exist) is an
// error that does not wrap ErrUnavailable.
func (c *Client) TestSubmit(ctx context.Context, script string, sbatchArgs ...string) (StartEstimate, error) {
	argv := append([]string{c.sbatch(), "--test-only"}, sbatchArgs...)
	argv = append(argv, script)
	_, stderr, err := c.runBoth(ctx, argv...)
	if err != nil {
		return StartEstimate{}, fmt.Errorf("test submit %s: %w", script, err)
	}
	est, err := parseTestOnly(stderr, c.location())
	if err != nil {
		return StartEstimate{}, fmt.Errorf("test submit %s: %w", script, err)
	}
	return est, nil
}

// parseTestOnly reads sbatch --test-only's stderr.
func parseTestOnly(out string, loc *time.Location) (StartEstimate, error) {
	m := testOnlyLine.FindStringSubmatch(out)
	if m == nil {
		return StartEstimate{}, fmt.Errorf("sbatch --test-only printed %q, not \"Job N to start at T … on nodes N in partition P\"",
			truncate(strings.TrimSpace(out)))
	}
	start, err := parseSlurmTime(m[2], loc)
	if err != nil {
		return StartEstimate{}, fmt.Errorf("sbatch --test-only start time %q: %w", m[2], err)
	}
	nodes, err := ExpandHostlist(m[3])
	if err != nil {
		return StartEstimate{}, fmt.Errorf("sbatch --test-only nodes %q: %w", m[3], err)
	}
	return StartEstimate{JobID: m[1], Start: start, Nodes: nodes, Partition: m[4]}, nil
}
