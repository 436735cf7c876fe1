package slurm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// ErrNotInJob is wrapped by AllocationFromEnv when the process does not run
// inside a Slurm job (SLURM_JOB_ID is unset).
var ErrNotInJob = errors.New("not inside a Slurm job")

// Allocation is what the batch script's environment says about the job it
// runs in. The zero value means "no job".
type Allocation struct {
	// JobID is SLURM_JOB_ID.
	JobID string
	// JobName is SLURM_JOB_NAME; empty if unset.
	JobName string
	// Partition is SLURM_JOB_PARTITION; empty if unset.
	Partition string
	// Nodes is SLURM_JOB_NODELIST expanded, in Slurm's order.
	Nodes []string
	// BatchNode is the node the batch script runs on: SLURMD_NODENAME, or
	// the first of Nodes when that is unset.
	BatchNode string
	// RestartCount is SLURM_RESTART_COUNT: how often the job was requeued
	// before this run. Slurm leaves it unset on the first run, which is 0.
	RestartCount int
	// SubmitDir is SLURM_SUBMIT_DIR; empty if unset.
	SubmitDir string
}

// AllocationFromEnv reads the job's allocation from the environment through
// getenv (os.Getenv in production). Outside a job it returns an error wrapping
// ErrNotInJob; a malformed variable gives an error that names it.
func AllocationFromEnv(getenv func(string) string) (Allocation, error) {
	a := Allocation{
		JobID:     getenv("SLURM_JOB_ID"),
		JobName:   getenv("SLURM_JOB_NAME"),
		Partition: getenv("SLURM_JOB_PARTITION"),
		SubmitDir: getenv("SLURM_SUBMIT_DIR"),
		BatchNode: getenv("SLURMD_NODENAME"),
	}
	if a.JobID == "" {
		return Allocation{}, fmt.Errorf("%w: SLURM_JOB_ID is not set; run under sbatch, or use check-config", ErrNotInJob)
	}
	nodes, err := nodesFromEnv(getenv("SLURM_JOB_NODELIST"))
	if err != nil {
		return Allocation{}, err
	}
	a.Nodes = nodes
	if a.BatchNode == "" {
		a.BatchNode = nodes[0]
	} else if !slices.Contains(nodes, a.BatchNode) {
		return Allocation{}, fmt.Errorf("read allocation: SLURMD_NODENAME=%q is not in SLURM_JOB_NODELIST %v", a.BatchNode, nodes)
	}
	if rc := getenv("SLURM_RESTART_COUNT"); rc != "" {
		n, err := strconv.Atoi(rc)
		if err != nil || n < 0 {
			return Allocation{}, fmt.Errorf("read allocation: SLURM_RESTART_COUNT=%q is not a count", rc)
		}
		a.RestartCount = n
	}
	return a, nil
}

func nodesFromEnv(list string) ([]string, error) {
	if list == "" {
		return nil, errors.New("read allocation: SLURM_JOB_NODELIST is not set although SLURM_JOB_ID is")
	}
	nodes, err := ExpandHostlist(list)
	if err != nil {
		return nil, fmt.Errorf("read allocation: SLURM_JOB_NODELIST: %w", err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("read allocation: SLURM_JOB_NODELIST=%q names no node", list)
	}
	return nodes, nil
}
