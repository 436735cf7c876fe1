package tier

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints/tomlconf"
)

// Elastic is the [elastic] table of a distributed tier whose nodes are
// separate one-node jobs (members, supervisor/elastic): it keeps serving on
// the nodes science leaves it, with the plan for that many nodes.
type Elastic struct {
	// Members is how many member jobs the tier is made of (the keeper keeps
	// that many queued); the plan for Members nodes is the full one.
	Members int
	// Plans maps a node count to what the head runs with on that many
	// nodes. A count without a plan is not served.
	Plans map[int]NodePlan
	// GrowAfter: when members come back, the leader re-plans to the larger
	// plan (a reload of the model) only once nothing has been in flight for
	// this long; 0 means never (the tier keeps its smaller plan until its
	// head restarts for another reason).
	GrowAfter time.Duration
	// Model is the model file the head loads; any member may lead, so it
	// must be readable on every member's node (checked at start).
	Model string
	// Lease and Skew time the membership (elastic.Timing).
	Lease, Skew time.Duration
	// Memory, when GPUMemory is set, checks each plan: on every node, the
	// node's share of the model and of the KV cache, plus Overhead, must fit
	// GPUMemory.
	GPUMemory, ModelSize, KVPerToken, Overhead int64
}

// NodePlan is what the head runs with on a given number of nodes.
type NodePlan struct {
	// Ctx is the context size ({ctx} in the head's command).
	Ctx int
	// TensorSplit holds one weight per node, the head's first ({tensor_split}).
	TensorSplit []float64
}

// LeadMargin is what a leader's lead ends before its lease less the skew:
// the time its head's shim takes to kill the head and the kernel to reap
// it (elastic.Timing.LeadEnd). The lead lasts lease - skew - LeadMargin
// after each renewal.
const LeadMargin = time.Second

// minLeadWindow is the least the lead must last after a renewal (lease -
// skew - LeadMargin): the leader renews it every second.
const minLeadWindow = 2 * time.Second

// defaultElastic is the [elastic] table's defaults.
func defaultElastic() *Elastic {
	return &Elastic{Plans: map[int]NodePlan{}, GrowAfter: 5 * time.Minute, Lease: 10 * time.Second, Skew: 5 * time.Second}
}

// elastic is the field for [elastic].
func (d *decoder) elastic(e *Elastic) tomlconf.Field {
	return func(key toml.Key, v any) {
		d.Table(key, v, map[string]tomlconf.Field{
			"members":      d.Int(&e.Members),
			"grow_after":   d.Duration(&e.GrowAfter),
			"model":        d.String(&e.Model),
			"lease":        d.Duration(&e.Lease),
			"skew":         d.Duration(&e.Skew),
			"gpu_memory":   d.Bytes(&e.GPUMemory),
			"model_size":   d.Bytes(&e.ModelSize),
			"kv_per_token": d.Bytes(&e.KVPerToken),
			"overhead":     d.Bytes(&e.Overhead),
			"plans": d.Each(func(name string) tomlconf.Field {
				return func(key toml.Key, v any) {
					n, err := strconv.Atoi(name)
					if err != nil || n < 1 || n > 64 {
						d.Fail(key, "must be named by a node count, 1 to 64 ([elastic.plans.3])")
						return
					}
					var p NodePlan
					d.Table(key, v, map[string]tomlconf.Field{
						"ctx":          d.Int(&p.Ctx),
						"tensor_split": d.Numbers(&p.TensorSplit),
					}, nil)
					e.Plans[n] = p
				}
			}),
		}, nil)
	}
}

// validateElastic checks [elastic] and what it requires of the rest.
func (d *decoder) validateElastic(c *Config) {
	e := c.Elastic
	key := func(k ...string) toml.Key { return append(toml.Key{"elastic"}, k...) }
	switch {
	case c.Kind != KindDistributed:
		d.fail(key(), `only a distributed tier can be elastic (kind = "distributed")`)
		return
	case e.Members < 2:
		d.fail(key("members"), "must be at least 2 (got %d)", e.Members)
	case e.Members > 64:
		d.fail(key("members"), "must be at most 64 (got %d)", e.Members)
	}
	if e.Model == "" {
		d.fail(key("model"), "required: the model file every member checks it can read (any member may lead)")
	}
	d.positive(key("lease"), e.Lease)
	d.positive(key("skew"), e.Skew)
	// A leader leads until skew and the margin before its lease ends,
	// renewing it every second: the lease must leave room for that.
	if e.Lease > 0 && e.Skew > 0 && e.Lease < e.Skew+LeadMargin+minLeadWindow {
		d.fail(d.blame(key("lease"), key("skew")), "lease (%s) must be at least skew (%s) + %s margin + %s", e.Lease, e.Skew, LeadMargin, minLeadWindow)
	}
	// The leader asks its head how busy it is off its own goroutine, but an
	// answer that takes longer than the lead lasts speaks of a head that may
	// be gone by then (issue 30: with 5 s, the default lease and skew, the
	// renewals came after the head's lease had run out).
	if lead := e.Lease - e.Skew - LeadMargin; lead >= minLeadWindow && c.Timeouts.HealthTimeout > lead {
		d.fail(d.blame(toml.Key{"timeouts", "health_timeout"}, key("lease"), key("skew")),
			"health_timeout (%s) must fit in the lead: lease (%s) - skew (%s) - %s margin = %s", c.Timeouts.HealthTimeout, e.Lease, e.Skew, LeadMargin, lead)
	}
	if e.GrowAfter < 0 {
		d.fail(key("grow_after"), "must not be negative (0 means never)")
	}
	if _, ok := e.Plans[e.Members]; !ok && e.Members >= 2 {
		d.fail(key("plans"), "needs a plan for all %d members ([elastic.plans.%d])", e.Members, e.Members)
	}
	for _, n := range slices.Sorted(maps.Keys(e.Plans)) {
		d.validateNodePlan(c, n, e.Plans[n])
	}
	if !commandUses(c.Head.Command, phCtx) {
		d.fail(toml.Key{"head", "command"}, `an elastic head must be given each plan's context: add "--ctx-size", "{ctx}"`)
	}
	for _, k := range []string{"min_workers", "tensor_split"} {
		if d.defined(k) {
			d.fail(toml.Key{k}, "not used by an elastic tier: each [elastic.plans.N] says what N nodes run with")
		}
	}
}

// validateNodePlan checks one plan: its split, and that it fits the GPUs
// when the config declares their memory and the model's size.
func (d *decoder) validateNodePlan(c *Config, n int, p NodePlan) {
	key := func(k ...string) toml.Key { return append(toml.Key{"elastic", "plans", strconv.Itoa(n)}, k...) }
	e := c.Elastic
	switch {
	case n > e.Members:
		d.fail(key(), "plans for %d nodes but the tier has %d members", n, e.Members)
	case n < 2:
		d.fail(key(), "a head with no worker is no distributed tier: leave 1 node unplanned (not served)")
	}
	if p.Ctx < 1 {
		d.fail(key("ctx"), "must be at least 1 (got %d)", p.Ctx)
	}
	if len(p.TensorSplit) != n {
		d.fail(key("tensor_split"), "needs one weight per node, %d (got %d)", n, len(p.TensorSplit))
		return
	}
	for i, w := range p.TensorSplit {
		if w <= 0 {
			d.fail(key("tensor_split"), "weight %d must be greater than 0 (got %g)", i, w)
			return
		}
	}
	if e.GPUMemory > 0 {
		if err := e.fits(p); err != nil {
			d.fail(key(), "%v", err)
		}
	}
}

// errMemoryUnknown says a memory check lacks the model's size.
var errMemoryUnknown = errors.New("gpu_memory is set, so model_size is needed to check the plans")

// NodeMemory is what one node of a plan needs on its GPU, in bytes: its
// share of the model and of the KV cache, and the overhead.
type NodeMemory struct {
	// Share is the node's fraction of both: its tensor_split weight over
	// the weights' sum.
	Share               float64
	Model, KV, Overhead float64
}

// Need is all the node needs.
func (m NodeMemory) Need() float64 { return m.Model + m.KV + m.Overhead }

// Memory estimates what each node of plan p needs on its GPU, the head's
// node first (tensor_split order), for the context p.Ctx; ok is false
// without model_size (no estimate).
func (e *Elastic) Memory(p NodePlan) (nodes []NodeMemory, ok bool) {
	if e.ModelSize <= 0 {
		return nil, false
	}
	var total float64
	for _, w := range p.TensorSplit {
		total += w
	}
	nodes = make([]NodeMemory, len(p.TensorSplit))
	for i, w := range p.TensorSplit {
		share := w / total
		nodes[i] = NodeMemory{Share: share, Model: float64(e.ModelSize) * share,
			KV: float64(e.KVPerToken) * float64(p.Ctx) * share, Overhead: float64(e.Overhead)}
	}
	return nodes, true
}

// fits checks that every node of plan p holds its share of the model and
// of the KV cache, plus the overhead, within the GPU's memory.
func (e *Elastic) fits(p NodePlan) error {
	nodes, ok := e.Memory(p)
	if !ok {
		return errMemoryUnknown
	}
	for i, m := range nodes {
		if m.Need() > float64(e.GPUMemory) {
			who := "the head's node"
			if i > 0 {
				who = fmt.Sprintf("node %d", i+1)
			}
			return fmt.Errorf("does not fit: %s needs %s of %s (its %.0f%% of the model %s, of the KV cache for %d tokens %s, overhead %s)",
				who, gib(m.Need()), gib(float64(e.GPUMemory)), m.Share*100, gib(m.Model), p.Ctx, gib(m.KV), gib(m.Overhead))
		}
	}
	return nil
}

// gib prints bytes as GiB with one decimal.
func gib(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }

// MaxPlanned is the largest node count with a plan.
func (e *Elastic) MaxPlanned() int {
	n := 0
	for k := range e.Plans {
		n = max(n, k)
	}
	return n
}

// PlanFor is the plan for the largest planned node count that is at most
// nodes; ok is false when there is none (too few nodes: not served).
func (e *Elastic) PlanFor(nodes int) (n int, p NodePlan, ok bool) {
	for k, v := range e.Plans {
		if k <= nodes && k > n {
			n, p, ok = k, v, true
		}
	}
	return n, p, ok
}

// Member is one member of an elastic tier as a plan needs it.
type Member struct {
	// JobID and RestartCount are the member's job and run.
	JobID        string
	RestartCount int
	// Node runs it; Addr is its (resolved) cluster-network address, where
	// its rpc-server listens on Port.
	Node string
	Addr string
	Port int
}

// ErrNotServed means too few members are up for any plan.
var ErrNotServed = errors.New("too few nodes for any plan: not served")

// LeaderPlan is the plan of the head an elastic tier's leader runs: the
// head on the leader's node, with --rpc naming workers (other members'
// rpc-servers), and the context and split of the plan for 1+len(workers)
// nodes, or, with fewer planned, of the largest plan that fits (using the
// first workers). It returns the node count planned for, or ErrNotServed.
// The plan has no workers of its own: each member runs its rpc-server.
func (c *Config) LeaderPlan(leader Member, workers []Member) (*Plan, int, error) {
	n, np, ok := c.Elastic.PlanFor(1 + len(workers))
	if !ok {
		return nil, 0, ErrNotServed
	}
	workers = workers[:n-1]
	p := c.memberPlan(leader)
	wp := make([]Process, len(workers))
	for i, w := range workers {
		wp[i] = Process{Name: "rpc-" + w.Node, Role: RoleWorker, Node: w.Node, Addr: w.Addr, Port: w.Port}
	}
	vars := c.baseVars(PlanInput{JobID: leader.JobID, RestartCount: leader.RestartCount}, p.LogDir, len(workers))
	p.Head = Process{Name: "head", Role: RoleHead, Node: leader.Node, Addr: leader.Addr, Port: c.Head.Port,
		StepName: c.Tier + "-head"}
	hv := withProcessVars(vars, p.Head)
	hv[phRPC] = rpcList(wp)
	hv[phCtx] = strconv.Itoa(np.Ctx)
	hv[phTensorSplit] = elasticSplit(np.TensorSplit)
	if err := fillProcess(&p.Head, &c.Head, hv, p.LogDir); err != nil {
		return nil, 0, fmt.Errorf("plan tier %s for %d nodes: %w", c.Tier, n, err)
	}
	if err := c.fillEndpoint(p); err != nil {
		return nil, 0, fmt.Errorf("plan tier %s: %w", c.Tier, err)
	}
	return p, n, nil
}

// elasticSplit renders a plan's weights (head first) in llama.cpp's device
// order: the RPC devices first, in --rpc order, then the head's own GPU.
func elasticSplit(w []float64) string {
	parts := make([]string, 0, len(w))
	for _, x := range append(slices.Clone(w[1:]), w[0]) {
		parts = append(parts, strconv.FormatFloat(x, 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}

// MemberWorker is the rpc-server a member runs on its own node while it
// does not lead.
func (c *Config) MemberWorker(m Member) (Process, error) {
	p := c.memberPlan(m)
	proc := Process{Name: "rpc-" + m.Node, Role: RoleWorker, Node: m.Node, Addr: m.Addr, Port: c.Worker.Port,
		StepName: c.Tier + "-rpc-" + m.Node, ReadyPattern: c.Worker.ReadyPattern}
	vars := withProcessVars(c.baseVars(PlanInput{JobID: m.JobID, RestartCount: m.RestartCount}, p.LogDir, 0), proc)
	if err := fillProcess(&proc, c.Worker, vars, p.LogDir); err != nil {
		return Process{}, fmt.Errorf("plan tier %s: member worker: %w", c.Tier, err)
	}
	return proc, nil
}

// memberPlan is the part of a plan every member shares.
func (c *Config) memberPlan(m Member) *Plan {
	return &Plan{Tier: c.Tier, Kind: c.Kind, JobID: m.JobID, RestartCount: m.RestartCount,
		EndpointDir: c.EndpointDir, HintAddr: c.HintAddr, LogDir: path.Join(c.LogDir, m.JobID),
		Timeouts: c.Timeouts, Restart: c.Restart, Drain: c.Drain, Srun: c.Srun}
}
