package tier

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

// updateGolden has its own name: other tests of this package may define -update.
var updateGolden = flag.Bool("update-config", false, "rewrite testdata/config/*.golden")

// planTier is a distributed tier using every placeholder.
const planTier = `tier = "reasoning"
kind = "distributed"
endpoint_dir = "/shared/endpoints"
log_dir = "/shared/logs"
node_address = "{node}-ib"
endpoint_host = "{node}"
tensor_split = [27, 26, 28]

[head]
command = ["llama-server", "--host", "0.0.0.0", "--port", "{port}", "--rpc", "{rpc}",
           "--tensor-split", "{tensor_split}", "--alias", "{tier}-{job_id}-{restart_count}-{workers}"]
port = 8081
env = { CUDA_VISIBLE_DEVICES = "0", LOGS = "{log_dir}" }
srun_args = ["--gres=gpu:1"]

[worker]
command = ["rpc-server", "-H", "{addr}", "-p", "{port}"]
port = 50052
port_step = 1
env = { WHERE = "{node}" }
log_file = "rpc-{node}-{restart_count}.log"
ready_pattern = "Starting RPC server"
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := ParseConfig("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var threeNodes = []string{"vasp-01", "vasp-02", "vasp-03"}

func ibAddrs(nodes ...string) map[string]string {
	m := map[string]string{}
	for _, n := range nodes {
		m[n] = n + "-ib"
	}
	return m
}

// distributedWorker is the plan's worker on node with port.
func distributedWorker(node string, port int, restart string) Process {
	return Process{
		Name: "rpc-" + node, Role: RoleWorker, Node: node, Addr: node + "-ib", Port: port,
		Argv:         []string{"rpc-server", "-H", node + "-ib", "-p", strconv.Itoa(port)},
		Env:          map[string]string{"WHERE": node},
		SrunArgs:     nil,
		StepName:     "reasoning-rpc-" + node,
		LogPath:      "/shared/logs/42/rpc-" + node + "-" + restart + ".log",
		ReadyPattern: "Starting RPC server",
	}
}

func TestPlanDistributed(t *testing.T) {
	c := mustParse(t, planTier)
	head := func(rpc, split, workers, restart string) Process {
		return Process{
			Name: "head", Role: RoleHead, Node: "vasp-01", Addr: "vasp-01-ib", Port: 8081,
			Argv: []string{"llama-server", "--host", "0.0.0.0", "--port", "8081", "--rpc", rpc,
				"--tensor-split", split, "--alias", "reasoning-42-" + restart + "-" + workers},
			Env:      map[string]string{"CUDA_VISIBLE_DEVICES": "0", "LOGS": "/shared/logs/42"},
			SrunArgs: []string{"--gres=gpu:1"},
			StepName: "reasoning-head",
			LogPath:  "/shared/logs/42/head.log",
		}
	}
	base := Plan{
		Tier: "reasoning", Kind: KindDistributed, JobID: "42",
		EndpointHost: "vasp-01", EndpointPort: 8081, MinWorkers: 1,
		EndpointDir: "/shared/endpoints", LogDir: "/shared/logs/42",
		Timeouts: c.Timeouts, Restart: c.Restart, Drain: c.Drain, Srun: "srun",
	}
	tests := []struct {
		name string
		in   PlanInput
		want func(p *Plan)
	}{
		{
			name: "all workers: split in llama.cpp order, workers then head",
			in:   PlanInput{JobID: "42", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: ibAddrs(threeNodes...)},
			want: func(p *Plan) {
				p.Workers = []Process{distributedWorker("vasp-02", 50052, "0"), distributedWorker("vasp-03", 50053, "0")}
				p.Head = head("vasp-02-ib:50052,vasp-03-ib:50053", "26,28,27", "2", "0")
			},
		},
		{
			name: "first worker dropped: its weight leaves the split, the other keeps its port",
			in: PlanInput{JobID: "42", RestartCount: 3, Nodes: threeNodes, BatchNode: "vasp-01",
				Addrs: ibAddrs("vasp-01", "vasp-03"), Workers: []string{"vasp-03"}},
			want: func(p *Plan) {
				p.RestartCount = 3
				p.Workers = []Process{distributedWorker("vasp-03", 50053, "3")}
				p.Head = head("vasp-03-ib:50053", "28,27", "1", "3")
				p.IdleNodes = []string{"vasp-02"}
			},
		},
		{
			name: "batch node not first: weights follow the head, then the allocation order",
			in:   PlanInput{JobID: "42", Nodes: []string{"vasp-02", "vasp-01", "vasp-03"}, BatchNode: "vasp-01", Addrs: ibAddrs(threeNodes...)},
			want: func(p *Plan) {
				p.Workers = []Process{distributedWorker("vasp-02", 50052, "0"), distributedWorker("vasp-03", 50053, "0")}
				p.Head = head("vasp-02-ib:50052,vasp-03-ib:50053", "26,28,27", "2", "0")
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Plan(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			want := base
			tc.want(&want)
			if d := cmp.Diff(&want, got); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
}

func TestPlanSingle(t *testing.T) {
	c := mustParse(t, minimalSingle)
	got, err := c.Plan(PlanInput{JobID: "7_2", Nodes: []string{"n1", "n2"}, BatchNode: "n1",
		Addrs: map[string]string{"n1": "10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &Plan{
		Tier: "fast", Kind: KindSingle, JobID: "7_2",
		Head: Process{Name: "head", Role: RoleHead, Node: "n1", Addr: "10.0.0.1", Port: 8080,
			Argv: []string{"llama-server", "--port", "8080"}, Env: map[string]string{},
			StepName: "fast-head", LogPath: "/l/7_2/head.log"},
		EndpointHost: "10.0.0.1", EndpointPort: 8080, EndpointDir: "/e", LogDir: "/l/7_2",
		Timeouts: c.Timeouts, Restart: c.Restart, Drain: c.Drain, Srun: "srun",
		IdleNodes: []string{"n2"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("plan (-want +got):\n%s", d)
	}
}

func TestPlanErrors(t *testing.T) {
	dist := mustParse(t, planTier)
	noSplit := mustParse(t, strings.Replace(planTier, "tensor_split = [27, 26, 28]\n", "min_workers = 2\n", 1))
	samePort := mustParse(t, strings.Replace(planTier, "port_step = 1", "port_step = 0", 1))
	single := mustParse(t, minimalSingle)
	all := ibAddrs(threeNodes...)
	tests := []struct {
		name string
		c    *Config
		in   PlanInput
		want string
	}{
		{"bad job id", dist, PlanInput{JobID: "12/3", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: job id "12/3": must be digits (or digits_digits for an array task)`},
		{"negative restart count", dist, PlanInput{JobID: "1", RestartCount: -1, Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: restart count -1: must not be negative`},
		{"no nodes", dist, PlanInput{JobID: "1", BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: no nodes in the allocation`},
		{"node twice", dist, PlanInput{JobID: "1", Nodes: []string{"vasp-01", "vasp-01"}, BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: node vasp-01 appears twice in the allocation`},
		{"batch node outside the allocation", dist, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-09", Addrs: all},
			`plan tier reasoning: batch node "vasp-09" is not in the allocation vasp-01,vasp-02,vasp-03`},
		{"tensor_split does not match the allocation", dist, PlanInput{JobID: "1", Nodes: threeNodes[:2], BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: tensor_split has 3 weights (one per node) but the allocation has 2 nodes (vasp-01,vasp-02)`},
		{"min_workers above nodes-1", noSplit, PlanInput{JobID: "1", Nodes: threeNodes[:2], BatchNode: "vasp-01", Addrs: all},
			`plan tier reasoning: min_workers is 2 but the allocation vasp-01,vasp-02 has 1 node besides the batch node vasp-01`},
		{"too few active workers", noSplit, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all, Workers: []string{"vasp-03"}},
			`plan tier reasoning: min_workers is 2 but the active workers are only vasp-03`},
		{"worker on the batch node", dist, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all, Workers: []string{"vasp-01"}},
			`plan tier reasoning: worker node "vasp-01" is not a node of the allocation other than the batch node`},
		{"worker given twice", dist, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all, Workers: []string{"vasp-02", "vasp-02"}},
			`plan tier reasoning: worker node vasp-02 given twice`},
		{"missing address", dist, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: ibAddrs("vasp-01", "vasp-02")},
			`plan tier reasoning: no address for node vasp-03`},
		{"two workers on one address and port", samePort, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01",
			Addrs: map[string]string{"vasp-01": "127.0.0.1", "vasp-02": "127.0.0.1", "vasp-03": "127.0.0.1"}},
			`plan tier reasoning: rpc-vasp-02 and rpc-vasp-03 would both listen on 127.0.0.1:50052 (set worker.port_step, or give the head another port)`},
		{"workers given to a single tier", single, PlanInput{JobID: "1", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: all, Workers: []string{"vasp-02"}},
			`plan tier fast: workers vasp-02 given to a single tier`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.c.Plan(tc.in)
			if p != nil || err == nil {
				t.Fatalf("Plan = %v, %v; want an error", p, err)
			}
			if d := cmp.Diff(tc.want, err.Error()); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
		})
	}
}

func TestNodeAddresses(t *testing.T) {
	nodes := []string{"n1", "n2"}
	slurmAddrs := func(ns []string) (map[string]string, error) {
		return map[string]string{"n1": "10.0.0.1", "n2": "10.0.0.2"}, nil
	}
	tests := []struct {
		name, nodeAddress string
		from              func([]string) (map[string]string, error)
		want              map[string]string
		wantErr           string
	}{
		{name: "slurm", nodeAddress: "slurm", from: slurmAddrs,
			want: map[string]string{"n1": "10.0.0.1", "n2": "10.0.0.2"}},
		{name: "name", nodeAddress: "name", want: map[string]string{"n1": "n1", "n2": "n2"}},
		{name: "template", nodeAddress: "{node}-ib.cluster", want: map[string]string{"n1": "n1-ib.cluster", "n2": "n2-ib.cluster"}},
		{name: "slurm without a way to ask", nodeAddress: "slurm",
			wantErr: `node addresses of tier fast: node_address is "slurm" but no way to ask Slurm was given`},
		{name: "slurm fails", nodeAddress: "slurm",
			from:    func([]string) (map[string]string, error) { return nil, errors.New("scontrol: exit 1") },
			wantErr: "node addresses of tier fast: scontrol: exit 1"},
		{name: "slurm misses a node", nodeAddress: "slurm",
			from:    func([]string) (map[string]string, error) { return map[string]string{"n1": "10.0.0.1"}, nil },
			wantErr: "node addresses of tier fast: Slurm gave no address for node n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, "node_address = \""+tc.nodeAddress+"\"\n"+minimalSingle)
			got, err := c.NodeAddresses(nodes, tc.from)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("addresses (-want +got):\n%s", d)
			}
		})
	}
}

// shippedTierConfigs lists the tier configs under etc/ and etc/local/: the
// TOML files with a top-level tier key (etc/ holds other TOML files too).
func shippedTierConfigs(t testing.TB, etc string) []string {
	files, _ := filepath.Glob(filepath.Join(etc, "*.toml"))
	local, _ := filepath.Glob(filepath.Join(etc, "local", "*.toml"))
	var tiers []string
	for _, f := range append(files, local...) {
		var doc map[string]any
		if _, err := toml.DecodeFile(f, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, ok := doc["tier"]; ok {
			tiers = append(tiers, f)
		}
	}
	return tiers
}

// TestShippedConfigs loads every tier config under etc/ and plans it for a
// 3-node allocation, the size the shipped tiers are written for.
func TestShippedConfigs(t *testing.T) {
	files := shippedTierConfigs(t, "../../etc")
	if len(files) < 4 {
		t.Fatalf("found %d shipped configs (%v), want at least 4", len(files), files)
	}
	nodes := []string{"node1", "node2", "node3"}
	loopback := func(ns []string) (map[string]string, error) {
		m := map[string]string{}
		for _, n := range ns {
			m[n] = "127.0.0.1"
		}
		return m, nil
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			c, err := LoadConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			addrs, err := c.NodeAddresses(nodes, loopback)
			if err != nil {
				t.Fatal(err)
			}
			in := PlanInput{JobID: "1", Nodes: nodes, BatchNode: "node1", Addrs: addrs}
			if c.Elastic != nil {
				// Each member plans its own processes: the head for each
				// node count, the rpc-server.
				ms, _, err := c.ExampleMembers(in)
				if err != nil {
					t.Fatal(err)
				}
				if err := FormatElastic(&bytes.Buffer{}, c, ms); err != nil {
					t.Fatal(err)
				}
				return
			}
			p, err := c.Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			if c.Kind == KindDistributed && len(p.Workers) != 2 {
				t.Errorf("%d workers, want 2", len(p.Workers))
			}
			if err := FormatPlan(&bytes.Buffer{}, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFormatPlanGolden(t *testing.T) {
	c := mustParse(t, planTier)
	tests := []struct {
		name string
		in   PlanInput
	}{
		{"distributed", PlanInput{JobID: "42", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: ibAddrs(threeNodes...)}},
		{"distributed-dropped", PlanInput{JobID: "42", RestartCount: 1, Nodes: threeNodes, BatchNode: "vasp-01",
			Addrs: ibAddrs(threeNodes...), Workers: []string{"vasp-02"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := c.Plan(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := FormatPlan(&b, p); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "config", tc.name+".golden"), b.Bytes())
		})
	}
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update-config to create it)", err, t.Name())
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"--port", "--port"},
		{"a b", "'a b'"},
		{"", "''"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
		{"10.0.0.2:50052,10.0.0.3:50052", "10.0.0.2:50052,10.0.0.3:50052"},
	}
	for _, tc := range tests {
		if got := shellQuote(tc.in); got != tc.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestShippedConfigsRPCServerReadiness: real llama.cpp rpc-server prints
// "Starting RPC server" with printf before it initialises its devices and
// before it listens, and through a pipe (a step's stdout) that line sits in
// stdio's buffer. As a ready pattern it would start the head before the
// workers listen, or never fire; the startup port check is what tells. The
// configs under etc/local run the fake, which prints once it listens.
func TestShippedConfigsRPCServerReadiness(t *testing.T) {
	for _, f := range shippedTierConfigs(t, "../../etc") {
		if filepath.Base(filepath.Dir(f)) == "local" {
			continue
		}
		t.Run(f, func(t *testing.T) {
			c, err := LoadConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			if c.Worker == nil || len(c.Worker.Command) == 0 {
				return
			}
			if strings.Contains(strings.Join(c.Worker.Command, " "), "rpc-server") && c.Worker.ReadyPattern != "" {
				t.Errorf("worker %q has ready_pattern %q: rpc-server prints it before it listens", c.Worker.Command, c.Worker.ReadyPattern)
			}
		})
	}
}

// TestShippedConfigsRPCServerBindsIPv4: real rpc-server binds its -H with
// inet_addr, so it takes an IPv4 literal only ("Invalid host address" for a
// name, and it exits). With node addresses that are names, resolved as
// `llm-supervisor run` resolves them (ResolveAddresses, here with names that
// have IPv6 and IPv4 addresses), a shipped worker's -H must be IPv4.
func TestShippedConfigsRPCServerBindsIPv4(t *testing.T) {
	nodes := []string{"node1", "node2", "node3"}
	seen := map[string]int{}
	lookup := func(_ context.Context, _, host string) ([]net.IP, error) {
		if _, ok := seen[host]; !ok {
			seen[host] = len(seen) + 1
		}
		n := strconv.Itoa(seen[host])
		return []net.IP{net.ParseIP("fd00::" + n), net.ParseIP("10.9.0." + n)}, nil // both families
	}
	for _, f := range shippedTierConfigs(t, "../../etc") {
		if filepath.Base(filepath.Dir(f)) == "local" {
			continue
		}
		c, err := LoadConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		if c.Kind != KindDistributed {
			continue
		}
		t.Run(f, func(t *testing.T) {
			addrs, err := c.NodeAddresses(nodes, func(ns []string) (map[string]string, error) {
				m := map[string]string{}
				for _, n := range ns {
					m[n] = n + ".cluster" // NodeAddr may be a name too
				}
				return m, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// What `llm-supervisor run` does before planning.
			if addrs, err = ResolveAddresses(context.Background(), addrs, lookup); err != nil {
				t.Fatal(err)
			}
			w, err := firstWorker(c, PlanInput{JobID: "1", Nodes: nodes, BatchNode: "node1", Addrs: addrs})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.Index(w.Argv, "-H")
			if i < 0 || i+1 >= len(w.Argv) {
				t.Fatalf("rpc-server gets no -H: %q", w.Argv)
			}
			if a, err := netip.ParseAddr(w.Argv[i+1]); err != nil || !a.Is4() {
				t.Errorf("rpc-server -H %q: not an IPv4 address (argv %q)", w.Argv[i+1], w.Argv)
			}
		})
	}
}

// firstWorker is the rpc-server of the first worker node of in: of the
// plan, or for an elastic tier, of the member on that node.
func firstWorker(c *Config, in PlanInput) (Process, error) {
	if c.Elastic != nil {
		node := in.Nodes[1]
		return c.MemberWorker(Member{JobID: in.JobID, Node: node, Addr: in.Addrs[node], Port: c.Worker.Port})
	}
	p, err := c.Plan(in)
	if err != nil {
		return Process{}, err
	}
	return p.Workers[0], nil
}

func TestPlanSlotSave(t *testing.T) {
	src := strings.Replace(minimalSingle, `["llama-server", "--port", "{port}"]`, `["llama-server", "-m", "/m/a.gguf", "--port", "{port}"]`, 1) +
		"slot_save_dir = \"/shared/kv\"\nslot_save_ttl = \"1h\"\nslot_save_max_bytes = \"20GiB\"\n"
	c := mustParse(t, src)
	got, err := c.Plan(PlanInput{JobID: "7", Nodes: []string{"n1"}, BatchNode: "n1", Addrs: map[string]string{"n1": "10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"llama-server", "-m", "/m/a.gguf", "--port", "8080", "--slot-save-path", "/shared/kv"}, got.Head.Argv); d != "" {
		t.Errorf("head argv (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{SlotsDebugEnv: "1"}, got.Head.Env); d != "" {
		t.Errorf("head env (-want +got):\n%s", d)
	}
	if n := (SlotSave{BytesPerToken: 10}).NeedBytes([]string{"llama-server", "-c", "8192"}); n != 81920 {
		t.Errorf("NeedBytes = %d, want 10 × 8192", n)
	}
	if n := (SlotSave{BytesPerToken: 10}).NeedBytes([]string{"llama-server"}); n != 0 {
		t.Errorf("NeedBytes without -c = %d, want 0 (unknown)", n)
	}
	if d := cmp.Diff(SlotSave{Dir: "/shared/kv", TTL: time.Hour, MaxBytes: 20 << 30}, got.SlotSave); d != "" {
		t.Errorf("slot save (-want +got):\n%s", d)
	}
	without := Split(got.Kind, got.Timeouts, got.Drain, ShimMargin)
	with := got.Split(ShimMargin)
	if with.Save != without.InFlight*SaveShare/100 || with.InFlight+with.Save != without.InFlight {
		t.Errorf("split with saves %+v, without %+v: the saves must take their share of the in-flight wait", with, without)
	}
}
