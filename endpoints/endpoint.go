// Package endpoints owns the endpoint file: the small JSON document a running
// tier publishes in a shared directory so that the controller can route to it.
// It holds the format (this file), reading and strict validation of files that
// jobs wrote (untrusted input), atomic writing, the liveness decision (live.go:
// which entries are routed, as Servers) and the hint a writer sends after a
// write (hint.go). It is the contract between the two sides: the job
// (supervisor/...) writes files and sends hints, the controller
// (endpoints/tiers, endpoints/front, endpoints/keeper) reads them; both
// import it, so it imports neither, nor Slurm nor nginx (rendering is
// endpoints/nginx's).
package endpoints

import "time"

// SchemaVersion is the version of the endpoint file format written by this
// build. Readers take it and the versions before it that they still read
// (MinSchemaVersion), and reject any other. Bump it on any change that an
// older reader would misread; document the change in FORMAT.md.
const SchemaVersion = 2

// MinSchemaVersion is the oldest version readers still take: a job started
// by the previous release keeps being routed through an upgrade.
const MinSchemaVersion = 1

// State is where a published tier is in its life. The zero value is invalid.
type State string

// The states a tier's endpoint goes through: starting → ready → draining → (file removed).
const (
	// StateStarting: processes are being started or restarted; do not route.
	StateStarting State = "starting"
	// StateReady: the head answers /health with 200; route to it.
	StateReady State = "ready"
	// StateDraining: the tier is stopping (preemption, cancel, time limit);
	// stop routing new requests at once, in-flight requests finish.
	StateDraining State = "draining"
)

// Endpoint is the content of one endpoint file, <dir>/<tier>-<job id>.json.
// The zero value is not a valid endpoint.
type Endpoint struct {
	// Schema is the format version; SchemaVersion when written by this build.
	Schema int `json:"schema"`
	// Tier names the inference tier ("fast", "reasoning"): [a-z0-9_-], 1–32 chars.
	Tier string `json:"tier"`
	// JobID is the Slurm job id (digits; array jobs as "123_4").
	JobID string `json:"job_id"`
	// RestartCount is SLURM_RESTART_COUNT of the run that wrote the file (0 on the first run).
	// For one tier and job, the highest restart count wins.
	RestartCount int `json:"restart_count"`
	// Host and Port are where clients (nginx) reach the tier's head.
	Host string `json:"host"`
	Port int    `json:"port"`
	// State is the tier's state; only StateReady is routed.
	State State `json:"state"`
	// Reason says, for people, why the tier is in its state ("worker node2 exited", "preempted").
	Reason string `json:"reason,omitempty"`
	// Models lists the model names the head serves, from its /v1/models.
	Models []string `json:"models"`
	// Node is the Slurm node the head runs on.
	Node string `json:"node"`
	// PID is the supervisor's process id on the batch node.
	PID int `json:"pid"`
	// StartedAt is when this supervisor run started.
	StartedAt time.Time `json:"started_at"`
	// Heartbeat is when the file was last refreshed.
	Heartbeat time.Time `json:"heartbeat"`
	// LeaseExpires is the time after which a reader drops the entry if the file
	// was not refreshed (the supervisor was killed with SIGKILL, the node died).
	LeaseExpires time.Time `json:"lease_expires"`
	// RunID identifies the supervisor run that wrote the file (16 hex
	// digits, new at every start; from schema 2, which supervisors always
	// set). A writer replaces or removes only a file of its own run or of
	// an older restart.
	RunID string `json:"run_id,omitempty"`
	// InFlight is how many requests the head had in flight at the last
	// check (llamacpp:requests_processing + requests_deferred); nil when
	// unknown. From schema 2.
	InFlight *int `json:"in_flight,omitempty"`
	// Term is, for an elastic tier, the leadership term of the member that
	// runs the head: of a tier's files, only those of the highest term are
	// routed (a leader cut off from the others may still have a file). 0:
	// not elastic. From schema 2.
	Term int `json:"term,omitempty"`
	// Serving says, for people, what an elastic tier serves with: its
	// leader always sets it ("3 of 3 nodes, context 131072", "2 of 3
	// nodes, context 65536"). From schema 2.
	Serving string `json:"serving,omitempty"`
}

// FileName is the base name of the endpoint file for a tier and job.
func FileName(tier, jobID string) string { return tier + "-" + jobID + ".json" }

// IdleExitEnv is the environment variable the keeper sets on an extra
// replica's job (sbatch --export=ALL,...): its supervisor drains and ends
// the job after serving this long with no request in flight (a Go
// duration, "300s"). Part of the contract between the two sides, like
// the file.
const IdleExitEnv = "SLURM_LLM_IDLE_EXIT"
