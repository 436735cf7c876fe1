package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"slurm-llm/slurm"
	"slurm-llm/supervisor"
)

const checkConfigUsage = `usage: llm-supervisor check-config TIER.toml [options]

Validates a tier config and prints the plan it gives for an allocation, without Slurm.
Exit status: 0 valid, 1 invalid (one problem per line on stderr), 2 usage.

options:
  --nodelist LIST      the allocation, a Slurm hostlist ('vasp-[01-03]');
                       default: example nodes node1..nodeN, as many as the tier needs
  --batch-node NODE    the node the batch script runs on (default: the first node)
  --workers LIST       the active worker nodes, a hostlist (default: all but the batch node)
  --job-id ID          the job id (default 0)
  --restart-count N    SLURM_RESTART_COUNT (default 0)
  --addr NODE=ADDR     a node's address; repeat for each node. Without it, node_address
                       "slurm" uses the node name as a stand-in (and says so)
`

// checkConfigOptions are check-config's parsed arguments.
type checkConfigOptions struct {
	path, nodelist, batchNode, workers, jobID string
	restartCount                              int
	addrs                                     map[string]string
}

// addrFlag collects repeated --addr NODE=ADDR.
type addrFlag map[string]string

func (a addrFlag) String() string { return "" }

func (a addrFlag) Set(s string) error {
	node, addr, ok := strings.Cut(s, "=")
	if !ok || node == "" || addr == "" {
		return fmt.Errorf("want NODE=ADDR, got %q", s)
	}
	a[node] = addr
	return nil
}

// runCheckConfig is the check-config subcommand: args are those after
// "check-config". It returns the exit status.
func runCheckConfig(args []string, stdout, stderr io.Writer) int {
	opts, err := parseCheckConfigArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, checkConfigUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "check-config: %v\n\n%s", err, checkConfigUsage)
		return 2
	}
	cfg, err := supervisor.LoadConfig(opts.path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	in, notes, err := opts.planInput(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "check-config: %v\n\n%s", err, checkConfigUsage)
		return 2
	}
	plan, err := cfg.Plan(in)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", opts.path, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid\n\n", opts.path)
	if err := supervisor.FormatPlan(stdout, plan); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "\nnote: %s\n", n)
	}
	return 0
}

// parseCheckConfigArgs reads the config path and options, in any order.
func parseCheckConfigArgs(args []string) (*checkConfigOptions, error) {
	opts := &checkConfigOptions{addrs: map[string]string{}}
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // runCheckConfig prints the error and the usage once
	fs.Usage = func() {}
	fs.StringVar(&opts.nodelist, "nodelist", "", "")
	fs.StringVar(&opts.batchNode, "batch-node", "", "")
	fs.StringVar(&opts.workers, "workers", "", "")
	fs.StringVar(&opts.jobID, "job-id", "0", "")
	fs.IntVar(&opts.restartCount, "restart-count", 0, "")
	fs.Var(addrFlag(opts.addrs), "addr", "")
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return nil, fmt.Errorf("want one config file, got %d arguments", len(positional))
	}
	opts.path = positional[0]
	return opts, nil
}

// planInput builds the allocation to plan for from the options, with notes
// for the reader about what was made up.
func (o *checkConfigOptions) planInput(cfg *supervisor.Config) (supervisor.PlanInput, []string, error) {
	var notes []string
	nodes, err := slurm.ExpandHostlist(o.nodelist)
	if err != nil {
		return supervisor.PlanInput{}, nil, fmt.Errorf("--nodelist: %w", err)
	}
	if len(nodes) == 0 {
		nodes = exampleNodes(cfg)
		notes = append(notes, fmt.Sprintf("no --nodelist: planned for example nodes %s", strings.Join(nodes, ", ")))
	}
	in := supervisor.PlanInput{JobID: o.jobID, RestartCount: o.restartCount, Nodes: nodes, BatchNode: o.batchNode}
	if in.BatchNode == "" {
		in.BatchNode = nodes[0]
	}
	if o.workers != "" {
		if in.Workers, err = slurm.ExpandHostlist(o.workers); err != nil {
			return supervisor.PlanInput{}, nil, fmt.Errorf("--workers: %w", err)
		}
	}
	addrs, note, err := o.addresses(cfg, nodes)
	if err != nil {
		return supervisor.PlanInput{}, nil, err
	}
	in.Addrs = addrs
	if note != "" {
		notes = append(notes, note)
	}
	return in, notes, nil
}

// exampleNodes is an allocation of the size the tier needs.
func exampleNodes(cfg *supervisor.Config) []string {
	n := 1
	if cfg.Kind == supervisor.KindDistributed {
		n = 1 + max(1, cfg.MinWorkers)
		if cfg.TensorSplit != nil {
			n = len(cfg.TensorSplit)
		}
	}
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = "node" + strconv.Itoa(i+1)
	}
	return nodes
}

// addresses finds node addresses as the tier would, with --addr taking
// precedence and the node name standing in for Slurm's NodeAddr.
func (o *checkConfigOptions) addresses(cfg *supervisor.Config, nodes []string) (map[string]string, string, error) {
	for _, n := range sortedNames(o.addrs) {
		if !containsNode(nodes, n) {
			return nil, "", fmt.Errorf("--addr %s=%s: %s is not in the node list %s", n, o.addrs[n], n, strings.Join(nodes, ","))
		}
	}
	var standIns []string
	fromSlurm := func(ns []string) (map[string]string, error) {
		m := make(map[string]string, len(ns))
		for _, n := range ns {
			if a, ok := o.addrs[n]; ok {
				m[n] = a
			} else {
				m[n] = n
				standIns = append(standIns, n)
			}
		}
		return m, nil
	}
	addrs, err := cfg.NodeAddresses(nodes, fromSlurm)
	if err != nil {
		return nil, "", err
	}
	for n, a := range o.addrs {
		addrs[n] = a
	}
	note := ""
	if len(standIns) > 0 {
		note = fmt.Sprintf(`node_address = "slurm": the node name stands in for the NodeAddr Slurm would give for %s (give --addr NODE=ADDR to see the real one)`,
			strings.Join(standIns, ", "))
	}
	return addrs, note, nil
}

// sortedNames returns m's keys, sorted.
func sortedNames(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// containsNode reports whether nodes holds n.
func containsNode(nodes []string, n string) bool {
	for _, x := range nodes {
		if x == n {
			return true
		}
	}
	return false
}
