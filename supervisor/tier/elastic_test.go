package tier

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const elasticConfig = `tier = "reasoning"
kind = "distributed"
endpoint_dir = "/e"
log_dir = "/l"

[head]
command = ["llama-server", "-m", "/m.gguf", "--rpc", "{rpc}", "--tensor-split", "{tensor_split}", "--ctx-size", "{ctx}"]
port = 8081

[worker]
command = ["rpc-server", "-H", "{addr}", "-p", "{port}", "-c"]
port = 50052

[elastic]
members = 3
model = "/m.gguf"
gpu_memory = "32GiB"
model_size = "43.4GiB"
kv_per_token = "90KiB"
overhead = "2.5GiB"

[elastic.plans.3]
ctx = 131072
tensor_split = [27, 26, 27]

[elastic.plans.2]
ctx = 65536
tensor_split = [40, 40]
`

func TestElasticConfig(t *testing.T) {
	c, err := ParseConfig("t.toml", []byte(elasticConfig))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Elastic
	if e == nil || e.Members != 3 || len(e.Plans) != 2 || e.Plans[2].Ctx != 65536 || e.GPUMemory != 32<<30 || e.KVPerToken != 90<<10 {
		t.Fatalf("elastic = %+v", e)
	}
	for _, tt := range []struct{ nodes, want int }{{3, 3}, {2, 2}, {5, 3}} {
		if n, _, ok := e.PlanFor(tt.nodes); !ok || n != tt.want {
			t.Errorf("PlanFor(%d) = %d, %v; want %d", tt.nodes, n, ok, tt.want)
		}
	}
	if _, _, ok := e.PlanFor(1); ok {
		t.Error("PlanFor(1): a plan for one node, want none (not served)")
	}
}

func TestElasticConfigErrors(t *testing.T) {
	tests := []struct {
		name, from, to string
		want           string
	}{
		{name: "one member", from: "members = 3", to: "members = 1", want: "t.toml:15: elastic.members: must be at least 2 (got 1)"},
		{name: "no plan for all members", from: "[elastic.plans.3]\nctx = 131072\ntensor_split = [27, 26, 27]\n", to: "",
			want: "elastic.plans: needs a plan for all 3 members ([elastic.plans.3])"},
		{name: "a split of the wrong length", from: "tensor_split = [40, 40]", to: "tensor_split = [40, 40, 20]",
			want: "elastic.plans.2.tensor_split: needs one weight per node, 2 (got 3)"},
		{name: "a plan for more nodes than members", from: "[elastic.plans.2]", to: "[elastic.plans.4]",
			want: "elastic.plans.4: plans for 4 nodes but the tier has 3 members"},
		// A plan that cannot fit is a config error, not an out-of-memory head at 3 a.m.
		{name: "256K on two V100S does not fit", from: "ctx = 65536", to: "ctx = 262144",
			want: "t.toml:26: elastic.plans.2: does not fit: the head's node needs 35.4 GiB of 32.0 GiB (its 50% of the model 21.7 GiB, of the KV cache for 262144 tokens 11.2 GiB, overhead 2.5 GiB)"},
		{name: "memory declared, model size not", from: `model_size = "43.4GiB"`, to: "",
			want: "gpu_memory is set, so model_size is needed to check the plans"},
		{name: "a size without its unit", from: `gpu_memory = "32GiB"`, to: `gpu_memory = 32`,
			want: `t.toml:17: elastic.gpu_memory: must be a size as a string with its unit, e.g. "32GiB" (got integer)`},
		{name: "head without {ctx}", from: `, "--ctx-size", "{ctx}"]`, to: "]",
			want: `head.command: an elastic head must be given each plan's context: add "--ctx-size", "{ctx}"`},
		{name: "min_workers has no meaning", from: "log_dir = \"/l\"\n", to: "log_dir = \"/l\"\nmin_workers = 2\n",
			want: "min_workers: not used by an elastic tier"},
		{name: "elastic single tier", from: `kind = "distributed"`, to: `kind = "single"`, want: `only a distributed tier can be elastic`},
		{name: "a lease that leaves no time to lead", from: "members = 3", to: "members = 3\nlease = \"7s\"\nskew = \"5s\"",
			want: "elastic.lease: lease (7s) must be at least skew (5s) + 1s margin + 2s"},
		// Issue 30: with 5 s the renewals of the head's lease came after it
		// had run out, and its shim killed a serving head at every cycle.
		{name: "a health timeout longer than the lead", from: "[elastic]\n", to: "[timeouts]\nhealth_timeout = \"5s\"\n\n[elastic]\n",
			want: "timeouts.health_timeout: health_timeout (5s) must fit in the lead: lease (10s) - skew (5s) - 1s margin = 4s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(elasticConfig, tt.from, tt.to, 1)
			if src == elasticConfig {
				t.Fatalf("test replaces nothing: %q", tt.from)
			}
			_, err := ParseConfig("t.toml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig error = %v\nwant one containing %q", err, tt.want)
			}
		})
	}
}

func TestLeaderPlan(t *testing.T) {
	c, err := ParseConfig("t.toml", []byte(elasticConfig))
	if err != nil {
		t.Fatal(err)
	}
	leader := Member{JobID: "300", Node: "vasp-03", Addr: "10.78.0.13", Port: 50052}
	w1 := Member{JobID: "299", Node: "vasp-02", Addr: "10.78.0.12", Port: 50052}
	w2 := Member{JobID: "298", Node: "vasp-01", Addr: "10.78.0.11", Port: 50052}
	tests := []struct {
		name    string
		workers []Member
		nodes   int
		argv    string
		err     error
	}{
		{name: "all three", workers: []Member{w1, w2}, nodes: 3,
			argv: "llama-server -m /m.gguf --rpc 10.78.0.12:50052,10.78.0.11:50052 --tensor-split 26,27,27 --ctx-size 131072"},
		{name: "two left", workers: []Member{w2}, nodes: 2,
			argv: "llama-server -m /m.gguf --rpc 10.78.0.11:50052 --tensor-split 40,40 --ctx-size 65536"},
		{name: "alone: not served", err: ErrNotServed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, n, err := c.LeaderPlan(leader, tt.workers)
			if !errors.Is(err, tt.err) {
				t.Fatalf("LeaderPlan error = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if d := cmp.Diff(tt.argv, strings.Join(p.Head.Argv, " ")); d != "" || n != tt.nodes {
				t.Errorf("head argv (-want +got):\n%s\nnodes %d, want %d", d, n, tt.nodes)
			}
			if p.Head.Node != "vasp-03" || p.JobID != "300" || p.EndpointPort != 8081 || len(p.Workers) != 0 {
				t.Errorf("plan = head on %s job %s port %d, %d workers", p.Head.Node, p.JobID, p.EndpointPort, len(p.Workers))
			}
		})
	}
	wp, err := c.MemberWorker(w1)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff("rpc-server -H 10.78.0.12 -p 50052 -c", strings.Join(wp.Argv, " ")); d != "" || wp.Node != "vasp-02" {
		t.Errorf("member worker argv (-want +got):\n%s", d)
	}
}

// elasticFallback has a node count without a plan of its own (3: the plan
// for 2 runs), no memory keys and never grows back.
const elasticFallback = `tier = "big"
kind = "distributed"
endpoint_dir = "/e"
log_dir = "/l"
node_address = "{node}-ib"
endpoint_host = "{node}"

[head]
command = ["llama-server", "-m", "/m.gguf", "--port", "{port}", "--rpc", "{rpc}", "-ts", "{tensor_split}", "-c", "{ctx}"]
port = 8082

[worker]
command = ["rpc-server", "-H", "{addr}", "-p", "{port}"]
port = 50060
env = { LLAMA_CACHE = "/cache/{node}" }

[elastic]
members = 4
model = "/m.gguf"
grow_after = "0s"

[elastic.plans.4]
ctx = 32768
tensor_split = [1, 1, 1, 1]

[elastic.plans.2]
ctx = 8192
tensor_split = [1, 1]
`

func TestFormatElasticGolden(t *testing.T) {
	four := []string{"vasp-01", "vasp-02", "vasp-03", "vasp-04"}
	tests := []struct {
		name string
		src  string
		in   PlanInput
	}{
		{"elastic", elasticConfig, PlanInput{JobID: "300", Nodes: threeNodes, BatchNode: "vasp-01", Addrs: ibAddrs(threeNodes...)}},
		{"elastic-fallback", elasticFallback, PlanInput{JobID: "7", RestartCount: 2, Nodes: four, BatchNode: "vasp-03", Addrs: ibAddrs(four...)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.src)
			ms, _, err := c.ExampleMembers(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := FormatElastic(&b, c, ms); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "config", tc.name+".golden"), b.Bytes())
		})
	}
}

func TestElasticMemory(t *testing.T) {
	e := &Elastic{ModelSize: 40 << 30, KVPerToken: 1 << 10, Overhead: 1 << 30}
	p := NodePlan{Ctx: 1 << 20, TensorSplit: []float64{1, 3}} // a KV cache of 1 GiB in all
	got, ok := e.Memory(p)
	want := []NodeMemory{
		{Share: 0.25, Model: 10 << 30, KV: 1 << 28, Overhead: 1 << 30},
		{Share: 0.75, Model: 30 << 30, KV: 3 << 28, Overhead: 1 << 30},
	}
	if d := cmp.Diff(want, got); d != "" || !ok {
		t.Errorf("Memory (-want +got):\n%s", d)
	}
	if got[1].Need() != 31<<30+3<<28 {
		t.Errorf("Need = %v", got[1].Need())
	}
	if _, ok := (&Elastic{GPUMemory: 32 << 30}).Memory(p); ok {
		t.Error("Memory without model_size: an estimate, want none")
	}
}

func TestExampleMembers(t *testing.T) {
	c := mustParse(t, elasticConfig)
	addrs := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.4"}
	member := func(node string) Member {
		return Member{JobID: "5", RestartCount: 1, Node: node, Addr: addrs[node], Port: 50052}
	}
	tests := []struct {
		name    string
		nodes   []string
		batch   string
		want    []Member
		notes   []string
		wantErr string
	}{
		{name: "the batch node leads, the others in order", nodes: []string{"a", "b", "c"}, batch: "b",
			want: []Member{member("b"), member("a"), member("c")}},
		{name: "nodes beyond the members left out, said so", nodes: []string{"a", "b", "c", "d"}, batch: "a",
			want: []Member{member("a"), member("b"), member("c")}, notes: []string{"the tier has 3 members: d left out"}},
		{name: "too few nodes", nodes: []string{"a", "b"}, batch: "a",
			wantErr: "plan tier reasoning: 3 members need 3 example nodes, one per member, but the node list has 2 (a,b)"},
		{name: "batch node outside the list", nodes: []string{"a", "b", "c"}, batch: "x",
			wantErr: `plan tier reasoning: batch node "x" is not in the allocation a,b,c`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes, err := c.ExampleMembers(PlanInput{JobID: "5", RestartCount: 1, Nodes: tt.nodes, BatchNode: tt.batch, Addrs: addrs})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("members (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.notes, notes); d != "" {
				t.Errorf("notes (-want +got):\n%s", d)
			}
		})
	}
}

// TestElasticPlanInput: without a node list an elastic tier is planned for
// one example node per member (not for 1 + min_workers), and --workers,
// which names a job's fixed workers, has no meaning for it.
func TestElasticPlanInput(t *testing.T) {
	c := mustParse(t, elasticConfig)
	in, _, err := c.PlanInput(Allocation{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"node1", "node2", "node3"}, in.Nodes); d != "" {
		t.Errorf("example nodes (-want +got):\n%s", d)
	}
	if _, _, err := c.PlanInput(Allocation{Nodes: threeNodes, Workers: []string{"vasp-02"}}); err == nil {
		t.Error("PlanInput with workers for an elastic tier: no error")
	}
	if _, err := c.Plan(in); !errors.Is(err, errElasticPlan) {
		t.Errorf("Plan of an elastic tier: error %v, want %v", err, errElasticPlan)
	}
}
