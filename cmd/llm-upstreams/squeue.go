package main

import (
	"context"

	"slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
)

// slurmJobs answers tiers.Scheduler with one squeue call
// (slurm.Client.JobDetails: state, owner uid and name of each job).
type slurmJobs struct{ c *slurm.Client }

// Jobs implements tiers.Scheduler.
func (s slurmJobs) Jobs(ctx context.Context, ids []string) (map[string]tiers.Job, error) {
	details, err := s.c.JobDetails(ctx, ids)
	if err != nil {
		return nil, err
	}
	jobs := make(map[string]tiers.Job, len(details))
	for id, d := range details {
		jobs[id] = tiers.Job{State: string(d.State), UID: d.UID, Name: d.Name}
	}
	return jobs, nil
}
