package tier

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// minimalSingle is the smallest valid single tier.
const minimalSingle = `tier = "fast"
kind = "single"
endpoint_dir = "/e"
log_dir = "/l"

[head]
command = ["llama-server", "--port", "{port}"]
port = 8080
`

// minimalDistributed is the smallest valid distributed tier.
const minimalDistributed = `tier = "reasoning"
kind = "distributed"
endpoint_dir = "/e"
log_dir = "/l"

[head]
command = ["llama-server", "--rpc", "{rpc}"]
port = 8081

[worker]
command = ["rpc-server", "-p", "{port}"]
port = 50052
`

func TestParseConfigDefaults(t *testing.T) {
	got, err := ParseConfig("t.toml", []byte(minimalDistributed))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig("t.toml")
	want.Tier, want.Kind, want.EndpointDir, want.LogDir = "reasoning", KindDistributed, "/e", "/l"
	want.MinWorkers = 1
	want.Head.Command, want.Head.Port = []string{"llama-server", "--rpc", "{rpc}"}, 8081
	want.Worker = defaultWorker()
	want.Worker.Command, want.Worker.Port = []string{"rpc-server", "-p", "{port}"}, 50052
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("config (-want +got):\n%s", d)
	}
}

func TestParseConfigSetsEveryKey(t *testing.T) {
	src := `tier = "r"
kind = "distributed"
endpoint_dir = "/e"
log_dir = "/l"
node_address = "{node}-ib"
endpoint_host = "{node}.example"
min_workers = 2
tensor_split = [1.5, 2, 3]
srun = "/usr/bin/srun"
[head]
command = ["llama-server", "--rpc", "{rpc}", "--tensor-split", "{tensor_split}", "{{literal}}"]
port = 1
env = { A = "{job_id}" }
srun_args = ["--gres=gpu:1"]
log_file = "h-{restart_count}.log"
[worker]
command = ["/opt/rpc-server"]
port = 2
port_step = 3
env = { B = "x" }
srun_args = ["--mem=1G"]
log_file = "w-{node}.log"
ready_pattern = "up"
[timeouts]
worker_start = "1s"
load = "2s"
health_interval = "3s"
health_timeout = "4s"
unhealthy_after = "5s"
stall = "9s"
stop_grace = "6s"
heartbeat = "7s"
lease = "8s"
[restart]
initial_backoff = "1ms"
max_backoff = "2ms"
multiplier = 3
jitter = 0.5
max_failures = 4
window = "5m"
reset_after = "6m"
worker_start_failures = 7
[drain]
budget = "23s"
inflight_poll = "100ms"
max_failed_runs = 9
`
	got, err := ParseConfig("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Name: "t.toml", Tier: "r", Kind: KindDistributed, EndpointDir: "/e", LogDir: "/l",
		NodeAddress: "{node}-ib", EndpointHost: "{node}.example", MinWorkers: 2,
		TensorSplit: []float64{1.5, 2, 3}, Srun: "/usr/bin/srun",
		Head: ProcessConfig{
			Command: []string{"llama-server", "--rpc", "{rpc}", "--tensor-split", "{tensor_split}", "{{literal}}"},
			Port:    1, Env: map[string]string{"A": "{job_id}"}, SrunArgs: []string{"--gres=gpu:1"},
			LogFile: "h-{restart_count}.log",
		},
		Worker: &ProcessConfig{
			Command: []string{"/opt/rpc-server"}, Port: 2, PortStep: 3, Env: map[string]string{"B": "x"},
			SrunArgs: []string{"--mem=1G"}, LogFile: "w-{node}.log", ReadyPattern: "up",
		},
		Timeouts: Timeouts{WorkerStart: time.Second, Load: 2 * time.Second, HealthInterval: 3 * time.Second,
			HealthTimeout: 4 * time.Second, UnhealthyAfter: 5 * time.Second, Stall: 9 * time.Second, StopGrace: 6 * time.Second,
			Heartbeat: 7 * time.Second, Lease: 8 * time.Second},
		Restart: RestartSettings{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			Multiplier: 3, Jitter: 0.5, MaxFailures: 4, Window: 5 * time.Minute, ResetAfter: 6 * time.Minute,
			WorkerStartFailures: 7},
		Drain: DrainSettings{Budget: 23 * time.Second, InFlightPoll: 100 * time.Millisecond, MaxFailedRuns: 9},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("config (-want +got):\n%s", d)
	}
}

// badConfigs are files ParseConfig must refuse, with every message it must give.
var badConfigs = []struct {
	name string
	src  string
	want []string
}{
	{
		name: "unknown top-level key",
		src:  strings.Replace(minimalSingle, `log_dir = "/l"`, "log_dir = \"/l\"\nlogdir = \"/x\"", 1),
		want: []string{`t.toml:5: logdir: unknown key`},
	},
	{
		name: "one of several hint addresses without a port",
		src:  strings.Replace(minimalSingle, `log_dir = "/l"`, "log_dir = \"/l\"\nhint_addr = \"ctl:9466,ctl\"", 1),
		want: []string{`t.toml:5: hint_addr: must be host:port, the controller's hint_listen, or several separated by commas (got "ctl:9466,ctl")`},
	},
	{
		name: "unknown key in a table",
		src:  minimalSingle + "stop_grace = \"5s\"\n",
		want: []string{`t.toml:9: head.stop_grace: unknown key`},
	},
	{
		name: "key differing only in case",
		src:  minimalSingle + "Port = 1\n",
		want: []string{`t.toml:9: head.Port: unknown key`},
	},
	{
		name: "slot save dir relative, and no model file",
		src:  minimalSingle + "slot_save_dir = \"kv\"\n",
		want: []string{`t.toml:9: head.slot_save_dir: must be an absolute path (got "kv")`,
			`t.toml:9: head.slot_save_dir: the head's command names no model file (-m): slots are saved for a single-model head only`},
	},
	{
		name: "slot save bounds without a directory",
		src:  minimalSingle + "slot_save_ttl = \"1h\"\n",
		want: []string{`t.toml:9: head.slot_save_ttl: needs head.slot_save_dir`},
	},
	{
		name: "slot save dir in a worker",
		src:  minimalDistributed + "slot_save_dir = \"/kv\"\n",
		want: []string{`t.toml:13: worker.slot_save_dir: only allowed in [head]`},
	},
	{
		name: "unknown table",
		src:  minimalSingle + "\n[timeout]\nload = \"1m\"\n",
		want: []string{`t.toml:10: timeout: unknown key`},
	},
	{
		name: "worker-only key in head",
		src:  minimalSingle + "ready_pattern = \"x\"\n",
		want: []string{`t.toml:9: head.ready_pattern: only allowed in [worker]`},
	},
	{
		name: "wrong type",
		src:  strings.Replace(minimalSingle, "port = 8080", `port = "8080"`, 1),
		want: []string{`t.toml:8: head.port: must be an integer (got string)`},
	},
	{
		name: "command as a shell string",
		src:  strings.Replace(minimalSingle, `["llama-server", "--port", "{port}"]`, `"llama-server --port {port}"`, 1),
		want: []string{`t.toml:7: head.command: must be an array of strings (got string)`},
	},
	{
		name: "command element not a string",
		src:  strings.Replace(minimalSingle, `"--port", "{port}"]`, `"--port", 8080]`, 1),
		want: []string{`t.toml:7: head.command: element 2 must be a string (got integer)`},
	},
	{
		name: "bad duration",
		src:  minimalSingle + "[timeouts]\nload = \"15 minutes\"\n",
		want: []string{`t.toml:10: timeouts.load: not a duration: "15 minutes" (write e.g. "250ms", "30s", "10m")`},
	},
	{
		name: "duration as a number",
		src:  minimalSingle + "[timeouts]\nheartbeat = 5\n",
		want: []string{`t.toml:10: timeouts.heartbeat: must be a duration string like "30s" (got integer)`},
	},
	{
		name: "port 0",
		src:  strings.Replace(minimalSingle, "port = 8080", "port = 0", 1),
		want: []string{`t.toml:8: head.port: must be between 1 and 65535 (got 0)`},
	},
	{
		name: "port 70000",
		src:  strings.Replace(minimalDistributed, "port = 50052", "port = 70000", 1),
		want: []string{`t.toml:12: worker.port: must be between 1 and 65535 (got 70000)`},
	},
	{
		name: "missing port",
		src:  strings.Replace(minimalSingle, "port = 8080\n", "", 1),
		want: []string{`t.toml:6: head.port: required`},
	},
	{
		name: "unknown placeholder",
		src:  strings.Replace(minimalSingle, `"{port}"`, `"{prot}"`, 1),
		want: []string{`t.toml:7: head.command: argv[2]: unknown placeholder {prot}`},
	},
	{
		name: "unknown placeholder in env",
		src:  minimalSingle + "env = { X = \"{jobid}\" }\n",
		want: []string{`t.toml:9: head.env.X: unknown placeholder {jobid}`},
	},
	{
		name: "unclosed brace",
		src:  strings.Replace(minimalSingle, `"{port}"`, `"{port"`, 1),
		want: []string{`t.toml:7: head.command: argv[2]: unclosed "{" (write "{{" for a literal brace)`},
	},
	{
		name: "lone closing brace",
		src:  strings.Replace(minimalSingle, `"{port}"`, `"port}"`, 1),
		want: []string{`t.toml:7: head.command: argv[2]: lone "}" (write "}}" for a literal brace)`},
	},
	{
		name: "rpc in a worker command",
		src:  strings.Replace(minimalDistributed, `["rpc-server", "-p", "{port}"]`, `["rpc-server", "--rpc", "{rpc}"]`, 1),
		want: []string{`t.toml:11: worker.command: argv[2]: {rpc} is only available to the head`},
	},
	{
		name: "tensor_split placeholder in a single tier",
		src:  strings.Replace(minimalSingle, `"{port}"]`, `"{port}", "-ts", "{tensor_split}"]`, 1),
		want: []string{`t.toml:7: head.command: argv[4]: {tensor_split} needs a distributed tier (it describes the workers)`},
	},
	{
		name: "placeholder not allowed in log_file",
		src:  minimalSingle + "log_file = \"{log_dir}/head.log\"\n",
		want: []string{`t.toml:9: head.log_file: {log_dir} is not available in log_file`},
	},
	{
		name: "log_file outside the log dir",
		src:  minimalSingle + "log_file = \"../head.log\"\n",
		want: []string{`t.toml:9: head.log_file: must be a file name relative to <log_dir>/<job id> (got "../head.log")`},
	},
	{
		name: "worker table in a single tier",
		src:  minimalSingle + "\n[worker]\ncommand = [\"rpc-server\"]\nport = 50052\n",
		want: []string{`t.toml:10: worker: not allowed in a single tier (kind = "single" has no workers)`},
	},
	{
		name: "min_workers in a single tier",
		src:  "min_workers = 1\n" + minimalSingle,
		want: []string{`t.toml:1: min_workers: not allowed in a single tier (kind = "single" has no workers)`},
	},
	{
		name: "worker table missing in a distributed tier",
		src:  minimalDistributed[:strings.Index(minimalDistributed, "[worker]")],
		want: []string{`t.toml: worker: required table [worker] is missing (kind = "distributed")`},
	},
	{
		name: "head table missing",
		src:  minimalSingle[:strings.Index(minimalSingle, "[head]")],
		want: []string{`t.toml: head: required table [head] is missing`},
	},
	{
		name: "head is not a table",
		src:  "head = 5\n" + minimalSingle[:strings.Index(minimalSingle, "[head]")],
		want: []string{`t.toml:1: head: must be a table (got integer)`},
	},
	{
		name: "missing command",
		src:  strings.Replace(minimalSingle, "command = [\"llama-server\", \"--port\", \"{port}\"]\n", "", 1),
		want: []string{`t.toml:6: head.command: required (the program and its arguments, as an array)`},
	},
	{
		name: "empty argv",
		src:  strings.Replace(minimalSingle, `["llama-server", "--port", "{port}"]`, `[]`, 1),
		want: []string{`t.toml:7: head.command: must not be empty (the program and its arguments)`},
	},
	{
		name: "relative program path",
		src:  strings.Replace(minimalSingle, `"llama-server"`, `"bin/llama-server"`, 1),
		want: []string{`t.toml:7: head.command: must be a program name (looked up in PATH) or an absolute path (got "bin/llama-server")`},
	},
	{
		name: "distributed head without rpc",
		src:  strings.Replace(minimalDistributed, `["llama-server", "--rpc", "{rpc}"]`, `["llama-server"]`, 1),
		want: []string{`t.toml:7: head.command: a distributed head must be given its workers: add "--rpc", "{rpc}"`},
	},
	{
		name: "bad tier name",
		src:  strings.Replace(minimalSingle, `tier = "fast"`, `tier = "Fast tier"`, 1),
		want: []string{`t.toml:1: tier: must be 1-32 characters of a-z, 0-9, _ and - (got "Fast tier")`},
	},
	{
		name: "missing tier",
		src:  strings.Replace(minimalSingle, "tier = \"fast\"\n", "", 1),
		want: []string{`t.toml: tier: required`},
	},
	{
		name: "bad kind",
		src:  strings.Replace(minimalSingle, `kind = "single"`, `kind = "cluster"`, 1),
		want: []string{`t.toml:2: kind: must be "single" or "distributed" (got "cluster")`},
	},
	{
		name: "relative endpoint_dir",
		src:  strings.Replace(minimalSingle, `endpoint_dir = "/e"`, `endpoint_dir = "e"`, 1),
		want: []string{`t.toml:3: endpoint_dir: must be an absolute path (got "e")`},
	},
	{
		name: "node_address template without node",
		src:  "node_address = \"ib0\"\n" + minimalSingle,
		want: []string{`t.toml:1: node_address: must be "slurm", "name" or a template using {node} (got "ib0")`},
	},
	{
		name: "bad env name",
		src:  minimalSingle + "env = { \"CUDA-DEVICES\" = \"0\" }\n",
		want: []string{`t.toml:9: head.env.CUDA-DEVICES: not a valid environment variable name`},
	},
	{
		name: "min_workers above the nodes tensor_split names",
		src:  "min_workers = 3\ntensor_split = [1, 1, 1]\n" + minimalDistributed,
		want: []string{`t.toml:1: min_workers: needs 3 workers but tensor_split has 3 weights (the head and 2 workers)`},
	},
	{
		name: "tensor_split too short",
		src:  "tensor_split = [1]\n" + minimalDistributed,
		want: []string{`t.toml:1: tensor_split: needs a weight for the head and for each worker, at least 2 (got 1)`},
	},
	{
		name: "tensor_split weight zero",
		src:  "tensor_split = [1, 0]\n" + minimalDistributed,
		want: []string{`t.toml:1: tensor_split: weight 1 must be greater than 0 (got 0)`},
	},
	{
		name: "lease not longer than heartbeat",
		src:  minimalSingle + "[timeouts]\nheartbeat = \"30s\"\nlease = \"30s\"\n",
		want: []string{`t.toml:11: timeouts.lease: lease (30s) must be longer than heartbeat (30s)`},
	},
	{
		name: "heartbeat alone above the default lease",
		src:  minimalSingle + "[timeouts]\nheartbeat = \"1m\"\n",
		want: []string{`t.toml:10: timeouts.heartbeat: lease (30s) must be longer than heartbeat (1m0s)`},
	},
	{
		name: "max_backoff below initial_backoff",
		src:  minimalSingle + "[restart]\ninitial_backoff = \"10s\"\nmax_backoff = \"5s\"\n",
		want: []string{`t.toml:11: restart.max_backoff: max_backoff (5s) must be at least initial_backoff (10s)`},
	},
	{
		name: "jitter above 1",
		src:  minimalSingle + "[restart]\njitter = 1.5\n",
		want: []string{`t.toml:10: restart.jitter: must be between 0 and 1 (got 1.5)`},
	},
	{
		name: "drain budget too short for a distributed stop",
		src:  minimalDistributed + "[timeouts]\nstop_grace = \"10s\"\n[drain]\nbudget = \"20s\"\n",
		want: []string{`t.toml:16: drain.budget: drain.budget (20s) must be at least 27s: the ordered stop takes 26s (head 12s = stop_grace + 2s shim margin, then workers 12s, last resort 2s), and requests in flight need at least 1s; it would leave -6s for them`},
	},
	{
		// Regression: budget 12s with stop_grace 5s validated, yet left -2s
		// for requests in flight (the runner computed what validation did not).
		name: "drain budget that leaves nothing for requests in flight",
		src:  minimalDistributed + "[timeouts]\nstop_grace = \"5s\"\n[drain]\nbudget = \"12s\"\n",
		want: []string{`t.toml:16: drain.budget: drain.budget (12s) must be at least 17s: the ordered stop takes 16s (head 7s = stop_grace + 2s shim margin, then workers 7s, last resort 2s), and requests in flight need at least 1s; it would leave -4s for them`},
	},
	{
		name: "a single tier pays for one stop only",
		src:  minimalSingle + "[timeouts]\nstop_grace = \"5s\"\n[drain]\nbudget = \"9s\"\n",
		want: []string{`t.toml:12: drain.budget: drain.budget (9s) must be at least 10s: the ordered stop takes 9s (head 7s = stop_grace + 2s shim margin, last resort 2s), and requests in flight need at least 1s; it would leave 0s for them`},
	},
	{
		name: "negative duration",
		src:  minimalSingle + "[timeouts]\nstop_grace = \"-1s\"\n",
		want: []string{`t.toml:10: timeouts.stop_grace: must be greater than 0 (got -1s)`},
	},
	{
		name: "TOML syntax error",
		src:  strings.Replace(minimalSingle, "[head]", "[head", 1),
		want: []string{`t.toml:6: syntax error: expected '.' or ']' to end table name, but got '\n' instead`},
	},
	{
		name: "duplicate key",
		src:  minimalSingle + "port = 1\n",
		want: []string{`t.toml:9: syntax error: Key 'head.port' has already been defined.`},
	},
	{
		name: "every problem reported, sorted by line",
		src: `kind = "distributed"
tier = "R"
endpoint_dir = "/e"
log_dir = "/l"
[head]
command = ["llama-server", "{prot}"]
port = 0
[worker]
command = ["rpc-server"]
port = "x"
[timeouts]
lease = "1s"
`,
		want: []string{
			`t.toml:2: tier: must be 1-32 characters of a-z, 0-9, _ and - (got "R")`,
			`t.toml:6: head.command: argv[1]: unknown placeholder {prot}`,
			`t.toml:6: head.command: a distributed head must be given its workers: add "--rpc", "{rpc}"`,
			`t.toml:7: head.port: must be between 1 and 65535 (got 0)`,
			`t.toml:10: worker.port: must be an integer (got string)`,
			`t.toml:12: timeouts.lease: lease (1s) must be longer than heartbeat (5s)`,
		},
	},
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("t.toml", []byte(tc.src))
			if c != nil {
				t.Errorf("got a config from a bad file")
			}
			if err == nil {
				t.Fatal("no error")
			}
			if d := cmp.Diff(tc.want, strings.Split(err.Error(), "\n")); d != "" {
				t.Errorf("errors (-want +got):\n%s", d)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != "t.toml" {
				t.Errorf("error %v is not a *ConfigError for t.toml", err)
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, err := LoadConfig(t.TempDir() + "/nope.toml"); err == nil {
		t.Fatal("no error for a missing file")
	}
}

func TestTemplates(t *testing.T) {
	vars := map[string]string{"port": "80", "node": "n1"}
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "--metrics", want: "--metrics"},
		{name: "whole", in: "{port}", want: "80"},
		{name: "inside", in: "--port={port}", want: "--port=80"},
		{name: "two", in: "{node}:{port}", want: "n1:80"},
		{name: "escaped braces", in: `{{"a":{{}}}}`, want: `{"a":{}}`},
		{name: "escape next to placeholder", in: "{{{port}}}", want: "{80}"},
		{name: "empty", in: "", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expandTemplate(tc.in, vars)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("expand %q = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if _, err := expandTemplate("{addr}", vars); err == nil {
		t.Error("expanding a placeholder without a value gave no error")
	}
}

func TestParseConfigBoundsProblems(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, "k%d = %d\n", i, i)
	}
	_, err := ParseConfig("t.toml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	// 2000 unknown keys, then tier, kind, endpoint_dir, log_dir and [head] missing.
	want := "t.toml: 1955 more problems not shown"
	if len(lines) != maxProblems+1 || lines[0] != "t.toml:1: k0: unknown key" || lines[len(lines)-1] != want {
		t.Errorf("got %d lines, first %q, last %q; want %d lines ending %q", len(lines), lines[0], lines[len(lines)-1], maxProblems+1, want)
	}
	_, err = ParseConfig("t.toml", make([]byte, maxConfigBytes+1))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a huge file gave %v", err)
	}
}

// hint_addr may name the watcher's and the front door's hint listeners.
func TestHintAddrTakesSeveralAddresses(t *testing.T) {
	src := strings.Replace(minimalSingle, `log_dir = "/l"`, "log_dir = \"/l\"\nhint_addr = \"ctl:9466, ctl:9467\"", 1)
	c, err := ParseConfig("t.toml", []byte(src))
	if err != nil || c.HintAddr != "ctl:9466, ctl:9467" {
		t.Fatalf("got %v, %v", c, err)
	}
}
