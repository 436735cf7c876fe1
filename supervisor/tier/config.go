package tier

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"slurm-llm/endpoints/kvsave"
)

// Config is one tier's validated configuration, read from a TOML file by
// LoadConfig or ParseConfig (etc/README.md documents every key). A Config
// from those functions is always valid; its fields are for reading. The zero
// value is not a valid Config. Config.Plan turns it into a Plan for one run.
type Config struct {
	// Name is the file name used in messages (the path given to LoadConfig).
	Name string
	// Tier names the tier ("fast", "reasoning"): [a-z0-9_-], 1–32 characters.
	Tier string
	Kind Kind
	// EndpointDir is where endpoint files are written; LogDir the parent of
	// each job's log directory <LogDir>/<job id>. Both absolute.
	EndpointDir string
	LogDir      string
	// NodeAddress says how a node's address is found: NodeAddressSlurm,
	// NodeAddressName, or a template containing {node} (e.g. "{node}-ib").
	NodeAddress string
	// EndpointHost is a template ({node}, {addr} of the head) for the host
	// clients use; empty means the head's address.
	EndpointHost string
	// HintAddr is the controller's hint listener ("slurm-ctl:9466",
	// llm-upstreams' hint_listen): after each endpoint write the supervisor
	// sends it a hint, so routing follows at once although the controller's
	// inotify cannot see the compute nodes' writes (NFS). "" sends none.
	HintAddr string
	// MinWorkers is how many workers a distributed tier needs (≥ 1); 0 for single.
	MinWorkers int
	// TensorSplit holds one weight per node, head first then workers in
	// allocation order; nil means equal weights.
	TensorSplit []float64
	// Srun is the srun program ("srun" by default).
	Srun string
	Head ProcessConfig
	// Worker is the rpc-server configuration; nil for a single tier.
	Worker   *ProcessConfig
	Timeouts Timeouts
	Restart  RestartSettings
	Drain    DrainSettings
	// Elastic is set for an elastic tier ([elastic]): its nodes are
	// separate one-node member jobs, and the head runs with the plan for
	// the members that are up.
	Elastic *Elastic
}

// ProcessConfig is the [head] or [worker] table: what to run and how.
// Strings may hold placeholders ({port}, {addr}, …) that Plan fills.
type ProcessConfig struct {
	// Command is the argv template; Command[0] is a program name looked up in
	// PATH on the node, or an absolute path.
	Command []string
	Port    int
	// PortStep (workers only): worker i of the allocation listens on Port+i*PortStep.
	PortStep int
	// Env holds variables added to the process's environment (value templates).
	Env map[string]string
	// SrunArgs are extra srun options, passed literally.
	SrunArgs []string
	// LogFile is the log file template, relative to <log_dir>/<job id>.
	LogFile string
	// ReadyPattern (workers only) is output that means the worker listens.
	ReadyPattern string
	// SlotSave (head only) is where the head's slots are saved at the
	// drain; the zero value saves nothing.
	SlotSave SlotSave
}

// SlotSave is the head's slot saving: the [head] keys slot_save_dir,
// slot_save_ttl and slot_save_max_bytes. The zero value is off.
type SlotSave struct {
	// Dir is the directory (absolute, on shared storage) given to
	// llama-server as --slot-save-path; "" saves nothing.
	Dir string
	// TTL and MaxBytes bound what the directory keeps (kvsave.Bounds).
	TTL      time.Duration
	MaxBytes int64
	// BytesPerToken is the KV cache's size per token of the head's model
	// (slot_save_bytes_per_token; 0: unknown), for the check that the
	// directory saves a full context within the drain's save share.
	BytesPerToken int64
}

// NeedBytes is what saving every slot of a full context takes: bytes per
// token times the head's -c (its slots share it); 0 when either is
// unknown.
func (s SlotSave) NeedBytes(headArgv []string) int64 {
	for _, f := range kvsave.Flags(headArgv) {
		if v, ok := strings.CutPrefix(f, "ctx="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0
			}
			return n * s.BytesPerToken
		}
	}
	return 0
}

// Ways to find a node's address (Config.NodeAddress); anything else is a template.
const (
	// NodeAddressSlurm asks Slurm for the node's NodeAddr (scontrol show node).
	NodeAddressSlurm = "slurm"
	// NodeAddressName uses the node name itself as its address.
	NodeAddressName = "name"
)

// ConfigError is one problem in a config file. ParseConfig returns all of
// them joined (errors.Join), sorted by line.
type ConfigError struct {
	// File is the name given to ParseConfig (the path for LoadConfig).
	File string
	// Line is the 1-based line of the key (or of its table); 0 when neither
	// is in the file, e.g. a required table that is missing.
	Line int
	// Key is the dotted key ("worker.port", "head.env.CUDA_VISIBLE_DEVICES");
	// empty for TOML syntax errors.
	Key string
	// Reason says what is wrong, for people.
	Reason string
}

// Error formats the problem as "file:line: key: reason".
func (e *ConfigError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		s += ": " + e.Key
	}
	return s + ": " + e.Reason
}

// LoadConfig reads and validates the tier config at path. Errors name the
// path, the line and the key of each problem.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates a tier config. name is used in messages.
// On any problem it returns no Config and every problem found (errors.Join of
// *ConfigError, sorted by line).
func ParseConfig(name string, data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, &ConfigError{File: name, Reason: fmt.Sprintf("file is larger than %d bytes; not a tier config", maxConfigBytes)}
	}
	d, err := newDecoder(name, data)
	if err != nil {
		return nil, err
	}
	c := defaultConfig(name)
	d.decodeConfig(c)
	d.validate(c)
	if len(d.problems) > 0 {
		return nil, d.joined()
	}
	return c, nil
}

// maxConfigBytes bounds a config file; real ones are a few kilobytes.
const maxConfigBytes = 1 << 20

// defaultConfig is a Config with every default applied; decoding overwrites
// what the file sets.
func defaultConfig(name string) *Config {
	return &Config{
		Name:        name,
		NodeAddress: NodeAddressSlurm,
		Srun:        "srun",
		Head:        ProcessConfig{LogFile: "head.log", Env: map[string]string{}},
		Timeouts: Timeouts{
			WorkerStart:    60 * time.Second,
			Load:           15 * time.Minute,
			HealthInterval: 2 * time.Second,
			HealthTimeout:  2 * time.Second,
			UnhealthyAfter: 10 * time.Second,
			Stall:          2 * time.Minute,
			StopGrace:      5 * time.Second,
			Heartbeat:      5 * time.Second,
			Lease:          30 * time.Second,
		},
		Restart: RestartSettings{
			InitialBackoff:      time.Second,
			MaxBackoff:          time.Minute,
			Multiplier:          2,
			Jitter:              0.2,
			MaxFailures:         5,
			Window:              10 * time.Minute,
			ResetAfter:          5 * time.Minute,
			WorkerStartFailures: 3,
		},
		Drain: DrainSettings{
			Budget:        25 * time.Second,
			InFlightPoll:  250 * time.Millisecond,
			MaxFailedRuns: 3,
		},
	}
}

// defaultWorker is the [worker] table's defaults.
func defaultWorker() *ProcessConfig {
	return &ProcessConfig{LogFile: "rpc-{node}.log", Env: map[string]string{}}
}

// joined sorts the problems by line (then key) and joins them.
func (d *decoder) joined() error {
	sort.SliceStable(d.problems, func(i, j int) bool {
		a, b := d.problems[i], d.problems[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Key < b.Key
	})
	errs := make([]error, 0, len(d.problems)+1)
	for _, p := range d.problems {
		errs = append(errs, p)
	}
	if d.dropped > 0 {
		errs = append(errs, &ConfigError{File: d.name, Reason: fmt.Sprintf("%d more problems not shown", d.dropped)})
	}
	return errors.Join(errs...)
}
