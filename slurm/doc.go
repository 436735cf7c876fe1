// Package slurm is how slurm-llm talks to Slurm.
//
// Inside a job:
//   - AllocationFromEnv reads the job's allocation (job id, nodes, batch
//     node, restart count) from the batch script's environment.
//   - ExpandHostlist expands Slurm hostlists ("node[1-3]") natively, as
//     `scontrol show hostnames` does, without running a command.
//   - SrunArgv builds the srun command line that starts one process as its
//     own job step on one node (StepName names it after tier and role).
//
// Towards the controller, Client runs scontrol, squeue, sbatch and scancel
// with a timeout and sorts their failures into errors a caller can act on:
// ErrNoSuchJob when Slurm answered that the job does not exist, and
// ErrUnavailable when it did not answer at all (controller down, timeout,
// binary missing). An unavailable controller is never reported as a missing
// job, because a supervisor that believed its job gone would stop serving.
//
// Behaviour this package relies on was measured on Slurm 22.05; see
// testdata/ for captured command output. Tests that need a real cluster
// carry the build tag e2e (scripts/slurm-cluster.sh up brings one up).
//
// It reports what Slurm says and never decides what it means for a tier:
// that is supervisor/job (inside a job) and endpoints/keeper and
// endpoints/tiers (on the controller).
package slurm
