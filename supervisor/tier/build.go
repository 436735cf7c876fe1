package tier

import (
	"errors"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PlanInput is what Config.Plan needs to know about one run of a job.
type PlanInput struct {
	// JobID is the Slurm job id (digits; "123_4" for array jobs).
	JobID string
	// RestartCount is SLURM_RESTART_COUNT (0 on the first run).
	RestartCount int
	// Nodes is the allocation, in Slurm's order (expanded SLURM_JOB_NODELIST).
	Nodes []string
	// BatchNode is the node the batch script (and so the head) runs on; one of Nodes.
	BatchNode string
	// Addrs maps node name to address, from Config.NodeAddresses; it needs
	// an entry for the batch node and each active worker node.
	Addrs map[string]string
	// Workers are the active worker nodes (a subset of Nodes without the
	// batch node, e.g. after a node was dropped); nil means all of them.
	Workers []string
}

// errElasticPlan says Plan was asked for an elastic tier, which has no
// plan of one job: each member plans its own (LeaderPlan, MemberWorker).
var errElasticPlan = errors.New("an elastic tier is planned by its members (LeaderPlan, MemberWorker), not as one job")

var jobIDPattern = regexp.MustCompile(`^[0-9]+(_[0-9]+)?$`)

// Plan builds the processes of one run: the head on the batch node and,
// for a distributed tier, a worker on each active worker node, with every
// placeholder filled. It fails rather than return a plan that cannot work
// (too few workers, an address missing, two processes on one address and port).
func (c *Config) Plan(in PlanInput) (*Plan, error) {
	p, err := c.plan(in)
	if err != nil {
		return nil, fmt.Errorf("plan tier %s: %w", c.Tier, err)
	}
	return p, nil
}

// plan is Plan without the error's prefix.
func (c *Config) plan(in PlanInput) (*Plan, error) {
	if c.Elastic != nil {
		return nil, errElasticPlan
	}
	if err := checkPlanInput(in); err != nil {
		return nil, err
	}
	candidates := without(in.Nodes, in.BatchNode)
	active, err := c.activeWorkers(in, candidates)
	if err != nil {
		return nil, err
	}
	p := &Plan{
		Tier: c.Tier, Kind: c.Kind, JobID: in.JobID, RestartCount: in.RestartCount,
		MinWorkers: c.MinWorkers, EndpointDir: c.EndpointDir, HintAddr: c.HintAddr,
		LogDir:   path.Join(c.LogDir, in.JobID),
		Timeouts: c.Timeouts, Restart: c.Restart, Drain: c.Drain, Srun: c.Srun,
	}
	vars := c.baseVars(in, p.LogDir, len(active))
	for i, node := range candidates {
		if !active[node] {
			p.IdleNodes = append(p.IdleNodes, node)
			continue
		}
		w, err := c.worker(node, i, in.Addrs, vars, p.LogDir)
		if err != nil {
			return nil, err
		}
		p.Workers = append(p.Workers, w)
	}
	p.SlotSave = c.Head.SlotSave
	if p.Head, err = c.head(in, p.Workers, vars, p.LogDir); err != nil {
		return nil, err
	}
	if err := c.fillEndpoint(p); err != nil {
		return nil, err
	}
	return p, checkPorts(p)
}

// checkPlanInput checks what does not depend on the config.
func checkPlanInput(in PlanInput) error {
	if !jobIDPattern.MatchString(in.JobID) {
		return fmt.Errorf("job id %q: must be digits (or digits_digits for an array task)", in.JobID)
	}
	if in.RestartCount < 0 {
		return fmt.Errorf("restart count %d: must not be negative", in.RestartCount)
	}
	if len(in.Nodes) == 0 {
		return errors.New("no nodes in the allocation")
	}
	seen := map[string]bool{}
	for _, n := range in.Nodes {
		if n == "" || strings.ContainsAny(n, " \t\n/,{}") {
			return fmt.Errorf("node name %q: not a node name", n)
		}
		if seen[n] {
			return fmt.Errorf("node %s appears twice in the allocation", n)
		}
		seen[n] = true
	}
	if !seen[in.BatchNode] {
		return fmt.Errorf("batch node %q is not in the allocation %s", in.BatchNode, strings.Join(in.Nodes, ","))
	}
	return nil
}

// without returns nodes minus skip, in order.
func without(nodes []string, skip string) []string {
	var out []string
	for _, n := range nodes {
		if n != skip {
			out = append(out, n)
		}
	}
	return out
}

// activeWorkers returns the set of worker nodes of this run, checked
// against the allocation, min_workers and tensor_split.
func (c *Config) activeWorkers(in PlanInput, candidates []string) (map[string]bool, error) {
	if c.Kind != KindDistributed {
		if len(in.Workers) > 0 {
			return nil, fmt.Errorf("workers %s given to a single tier", strings.Join(in.Workers, ","))
		}
		return map[string]bool{}, nil
	}
	if c.TensorSplit != nil && len(c.TensorSplit) != len(in.Nodes) {
		return nil, fmt.Errorf("tensor_split has %d weights (one per node) but the allocation has %d nodes (%s)",
			len(c.TensorSplit), len(in.Nodes), strings.Join(in.Nodes, ","))
	}
	names := in.Workers
	if names == nil {
		names = candidates
	}
	active := map[string]bool{}
	for _, n := range names {
		if n == in.BatchNode || !slices.Contains(candidates, n) {
			return nil, fmt.Errorf("worker node %q is not a node of the allocation other than the batch node", n)
		}
		if active[n] {
			return nil, fmt.Errorf("worker node %s given twice", n)
		}
		active[n] = true
	}
	need := max(1, c.MinWorkers)
	switch {
	case len(active) >= need:
	case in.Workers == nil:
		return nil, fmt.Errorf("min_workers is %d but the allocation %s has %s besides the batch node %s",
			need, strings.Join(in.Nodes, ","), plural(len(candidates), "node"), in.BatchNode)
	default:
		return nil, fmt.Errorf("min_workers is %d but the active workers are only %s",
			need, strings.Join(in.Workers, ","))
	}
	return active, nil
}

// baseVars are the placeholders every process of the run shares.
func (c *Config) baseVars(in PlanInput, logDir string, workers int) map[string]string {
	return map[string]string{
		phJobID:        in.JobID,
		phRestartCount: strconv.Itoa(in.RestartCount),
		phTier:         c.Tier,
		phLogDir:       logDir,
		phWorkers:      strconv.Itoa(workers),
	}
}

// nodeAddr returns a node's address from addrs, checked.
func nodeAddr(addrs map[string]string, node string) (string, error) {
	a, ok := addrs[node]
	if !ok || a == "" {
		return "", fmt.Errorf("no address for node %s", node)
	}
	if strings.ContainsAny(a, " \t\n/,{}") {
		return "", fmt.Errorf("address %q of node %s: not a host name or IP address", a, node)
	}
	return a, nil
}

// worker builds the rpc-server process on node, the index-th worker
// candidate of the allocation (its port does not move when others drop).
func (c *Config) worker(node string, index int, addrs, base map[string]string, logDir string) (Process, error) {
	addr, err := nodeAddr(addrs, node)
	if err != nil {
		return Process{}, err
	}
	port := c.Worker.Port + index*c.Worker.PortStep
	if port > 65535 {
		return Process{}, fmt.Errorf("worker on %s: port %d + %d × port_step %d = %d is above 65535",
			node, c.Worker.Port, index, c.Worker.PortStep, port)
	}
	name := "rpc-" + node
	proc := Process{Name: name, Role: RoleWorker, Node: node, Addr: addr, Port: port,
		StepName: c.Tier + "-" + name, ReadyPattern: c.Worker.ReadyPattern}
	return proc, fillProcess(&proc, c.Worker, withProcessVars(base, proc), logDir)
}

// head builds the llama-server process on the batch node, given the workers.
func (c *Config) head(in PlanInput, workers []Process, base map[string]string, logDir string) (Process, error) {
	addr, err := nodeAddr(in.Addrs, in.BatchNode)
	if err != nil {
		return Process{}, err
	}
	proc := Process{Name: "head", Role: RoleHead, Node: in.BatchNode, Addr: addr,
		Port: c.Head.Port, StepName: c.Tier + "-head"}
	vars := withProcessVars(base, proc)
	if c.Kind == KindDistributed {
		vars[phRPC] = rpcList(workers)
		vars[phTensorSplit] = c.tensorSplit(in.Nodes, in.BatchNode, workers)
	}
	if err := fillProcess(&proc, &c.Head, vars, logDir); err != nil {
		return proc, err
	}
	if c.Head.SlotSave.Dir != "" {
		proc.Argv = append(proc.Argv, "--slot-save-path", c.Head.SlotSave.Dir)
		// Real llama-server's /slots names a slot's prompt only with it
		// (server-context.cpp:2407, FACTS.md Q12): the save keys by it.
		if _, set := proc.Env[SlotsDebugEnv]; !set {
			proc.Env[SlotsDebugEnv] = "1"
		}
	}
	return proc, nil
}

// SlotsDebugEnv is set to 1 in the environment of a head that saves its
// slots: without it llama-server's GET /slots leaves out each slot's
// prompt, which keys the saved file.
const SlotsDebugEnv = "LLAMA_SERVER_SLOTS_DEBUG"

// withProcessVars copies base and adds a process's own placeholders.
func withProcessVars(base map[string]string, p Process) map[string]string {
	vars := make(map[string]string, len(base)+5)
	for k, v := range base {
		vars[k] = v
	}
	vars[phPort] = strconv.Itoa(p.Port)
	vars[phAddr] = p.Addr
	vars[phNode] = p.Node
	return vars
}

// rpcList is the head's --rpc value: the workers' addr:port, in order.
func rpcList(workers []Process) string {
	parts := make([]string, len(workers))
	for i, w := range workers {
		parts[i] = net.JoinHostPort(w.Addr, strconv.Itoa(w.Port))
	}
	return strings.Join(parts, ",")
}

// tensorSplit is the head's --tensor-split value in llama.cpp's device
// order: the RPC devices first, in --rpc order, then the head's local GPU.
// Configured weights are per node, head first then worker candidates in
// allocation order; a dropped worker's weight is left out.
func (c *Config) tensorSplit(nodes []string, batch string, workers []Process) string {
	weight := map[string]float64{}
	for i, n := range append([]string{batch}, without(nodes, batch)...) {
		weight[n] = 1
		if c.TensorSplit != nil {
			weight[n] = c.TensorSplit[i]
		}
	}
	parts := make([]string, 0, len(workers)+1)
	for _, w := range workers {
		parts = append(parts, strconv.FormatFloat(weight[w.Node], 'f', -1, 64))
	}
	parts = append(parts, strconv.FormatFloat(weight[batch], 'f', -1, 64))
	return strings.Join(parts, ",")
}

// fillProcess expands pc's templates into proc with vars.
func fillProcess(proc *Process, pc *ProcessConfig, vars map[string]string, logDir string) error {
	proc.Argv = make([]string, len(pc.Command))
	for i, a := range pc.Command {
		s, err := expandTemplate(a, vars)
		if err != nil {
			return fmt.Errorf("%s: command: %w", proc.Name, err)
		}
		proc.Argv[i] = s
	}
	proc.Env = make(map[string]string, len(pc.Env))
	for k, v := range pc.Env {
		s, err := expandTemplate(v, vars)
		if err != nil {
			return fmt.Errorf("%s: env %s: %w", proc.Name, k, err)
		}
		proc.Env[k] = s
	}
	proc.SrunArgs = append([]string(nil), pc.SrunArgs...)
	file, err := expandTemplate(pc.LogFile, vars)
	if err != nil {
		return fmt.Errorf("%s: log_file: %w", proc.Name, err)
	}
	proc.LogPath = path.Join(logDir, file)
	if !strings.HasPrefix(proc.LogPath, logDir+"/") {
		return fmt.Errorf("%s: log file %q is outside the log directory %s", proc.Name, file, logDir)
	}
	return nil
}

// fillEndpoint sets the endpoint host (endpoint_host, default the head's
// address) and port (the head's).
func (c *Config) fillEndpoint(p *Plan) error {
	p.EndpointPort = p.Head.Port
	p.EndpointHost = p.Head.Addr
	if c.EndpointHost == "" {
		return nil
	}
	host, err := expandTemplate(c.EndpointHost, map[string]string{phNode: p.Head.Node, phAddr: p.Head.Addr})
	if err != nil {
		return fmt.Errorf("endpoint_host: %w", err)
	}
	p.EndpointHost = host
	return nil
}

// checkPorts fails if two processes would listen on one address and port
// (on a test cluster every node may be 127.0.0.1).
func checkPorts(p *Plan) error {
	seen := map[string]string{}
	for _, proc := range append([]Process{p.Head}, p.Workers...) {
		hp := net.JoinHostPort(proc.Addr, strconv.Itoa(proc.Port))
		if other, ok := seen[hp]; ok {
			return fmt.Errorf("%s and %s would both listen on %s (set worker.port_step, or give the head another port)",
				other, proc.Name, hp)
		}
		seen[hp] = proc.Name
	}
	return nil
}
