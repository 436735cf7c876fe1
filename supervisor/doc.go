// Package supervisor runs one tier's processes for the length of a run: it
// starts the rpc-server workers and then the head (through a Launcher:
// srun steps, or local processes in tests), watches each by its process
// (never by probing a worker's port once the head holds it), restarts what
// fails in the right order under a restart policy, drains and stops in
// order when asked, and publishes the tier's endpoint file. Runner is the
// state machine; one goroutine owns it. What follows an exit, a ready
// worker, a failure or a stop request is one pure rule in life.go (a view
// of the tier and the event in, the steps out, each case a table-test row);
// the runner gathers the view and applies the steps (runner_life.go).
//
// It takes a validated plan (supervisor/tier) and reports what happens
// (Event); it does not read configs, ask Slurm why a run ends, or decide
// whether the job is requeued: supervisor/job does, around it.
package supervisor
