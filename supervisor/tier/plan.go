package tier

import "time"

// Kind is the shape of a tier. The zero value is invalid.
type Kind string

// The two kinds of tier.
const (
	// KindSingle is one llama-server on the batch node (the fast tier, router mode).
	KindSingle Kind = "single"
	// KindDistributed is rpc-server workers on the other nodes of the job and a
	// head llama-server on the batch node with --rpc naming them.
	KindDistributed Kind = "distributed"
)

// Role is what a process does in a tier. The zero value is invalid.
type Role string

// The roles of a tier's processes.
const (
	RoleHead   Role = "head"
	RoleWorker Role = "worker"
)

// Plan is a validated, fully expanded tier for one run of one job: which node
// runs which process with which argv. It is built by Config.Plan from the
// config and the allocation, and rebuilt when the set of workers changes
// (a node dropped below the configured count changes --rpc and the tensor split).
// A Plan is never partially valid: Config.Plan returns an error instead.
type Plan struct {
	Tier         string
	Kind         Kind
	JobID        string
	RestartCount int
	// Head is the llama-server (the only process of a single tier).
	Head Process
	// Workers are the rpc-server processes, in allocation node order; empty for KindSingle.
	Workers []Process
	// HintAddr is where a hint goes after each endpoint write ("": none).
	HintAddr string
	// EndpointHost and EndpointPort are what the endpoint file publishes for clients.
	EndpointHost string
	EndpointPort int
	// MinWorkers is how many workers the tier needs to keep serving (distributed only).
	MinWorkers int
	// EndpointDir is where the endpoint file is written; LogDir is <log_dir>/<job id>.
	EndpointDir string
	LogDir      string
	Timeouts    Timeouts
	Restart     RestartSettings
	Drain       DrainSettings
	// Srun is the srun binary to launch steps with ("srun" by default).
	Srun string
	// SlotSave is where the head's slots are saved at the drain (the
	// head's argv then has --slot-save-path); zero: nothing is saved.
	SlotSave SlotSave
	// IdleNodes are nodes of the allocation that run nothing: the extra
	// nodes of a single tier, and worker nodes left out of this run.
	IdleNodes []string
}

// Process is one process of a tier, ready to launch. Argv has every
// placeholder filled; Env holds only the variables the config adds.
type Process struct {
	// Name is unique within the tier: "head", "rpc-node2".
	Name string
	Role Role
	// Node is the Slurm node it runs on; Addr the address it binds/is reached at.
	Node string
	Addr string
	Port int
	Argv []string
	Env  map[string]string
	// SrunArgs are extra srun options from the config (e.g. "--gres=gpu:1").
	SrunArgs []string
	// LeaseUntil, when set, is when the process's lease ends unless the
	// supervisor renews it (supervisor.Runner.Lease; the step's shim kills
	// it then, shim.Config.LeaseUntil): an absolute time on the clock of the
	// process's node, which for an elastic leader's head is the leader's
	// own. An elastic leader's head has one; zero: none.
	LeaseUntil time.Time
	// StepName names the srun step: "<tier>-head", "<tier>-rpc-<node>".
	StepName string
	// LogPath is the file the process's output goes to.
	LogPath string
	// ReadyPattern, for workers, is a substring of the worker's output that
	// means it listens (real rpc-server: "Starting RPC server"); empty means
	// only the startup port check counts.
	ReadyPattern string
}

// Timeouts bound each waiting step of the lifecycle. Zero values are replaced
// by defaults when the config is loaded, so a Plan always has them set.
type Timeouts struct {
	// WorkerStart: a worker must be ready this long after its step starts.
	WorkerStart time.Duration
	// Load: the head's /health may answer 503 (loading) this long.
	Load time.Duration
	// HealthInterval and HealthTimeout: how often /health is polled, and each poll's limit.
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// UnhealthyAfter: /health failing for this long counts as a head failure.
	UnhealthyAfter time.Duration
	// Stall: a head with requests in flight whose work counters
	// (llamacpp:n_decode_total, which moves per token and per prompt batch)
	// do not move for this long is hung: a worker's link went silent and
	// llama.cpp's RPC waits forever (its /health stays 200).
	Stall time.Duration
	// StopGrace: after SIGTERM, a process has this long before SIGKILL.
	StopGrace time.Duration
	// Heartbeat: how often the endpoint file is refreshed; Lease: how long
	// after a refresh a reader may trust it.
	Heartbeat time.Duration
	Lease     time.Duration
}

// RestartSettings configure the restart policy (exponential backoff with
// jitter, a cap, reset after a healthy period, give up after a failure budget).
type RestartSettings struct {
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// Jitter is the fraction (0–1) of each delay that is randomised.
	Jitter float64
	// MaxFailures within Window make the supervisor give up.
	MaxFailures int
	Window      time.Duration
	// ResetAfter: this long healthy resets the backoff.
	ResetAfter time.Duration
	// WorkerStartFailures: a node whose worker fails to start this many times
	// in a row is dropped from the tier (if MinWorkers still hold).
	WorkerStartFailures int
}

// DrainSettings configure the ordered stop at preemption, cancellation and
// time limit.
type DrainSettings struct {
	// Budget is the whole time from notice to every process gone (the
	// partition's GraceTime minus a safety margin).
	Budget time.Duration
	// InFlightPoll is how often the head's in-flight requests are checked while draining.
	InFlightPoll time.Duration
	// MaxFailedRuns: a tier that failed to become ready in this many
	// consecutive runs stops requeueing itself.
	MaxFailedRuns int
}
