package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"slurm-llm/endpoints/fsutil"
	"slurm-llm/slurm"
	"slurm-llm/supervisor/tier"
)

const checkConfigUsage = `usage: llm-supervisor check-config TIER.toml [options]

Validates a tier config and prints the plan it gives for an allocation, without Slurm.
For an elastic tier ([elastic]): what its members run for each node count, one member
per node, the batch node's leading (its head) and the others running rpc-server.
Exit status: 0 valid, 1 invalid (one problem per line on stderr), 2 usage.

options:
  --nodelist LIST      the allocation, a Slurm hostlist ('vasp-[01-03]');
                       default: example nodes node1..nodeN, as many as the tier needs
                       (an elastic tier: one per member)
  --batch-node NODE    the node the batch script runs on, an elastic tier's leader
                       (default: the first node)
  --workers LIST       the active worker nodes, a hostlist (default: all but the batch node;
                       not for an elastic tier)
  --job-id ID          the job id (default 0)
  --restart-count N    SLURM_RESTART_COUNT (default 0)
  --addr NODE=ADDR     a node's address; repeat for each node. Without it, node_address
                       "slurm" uses the node name as a stand-in (and says so)
  --upstreams FILE     the controller's upstreams.toml (default: upstreams.toml beside
                       TIER.toml, if there), with keeper.toml beside TIER.toml (else the
                       keeper config upstreams.toml names): warns when the front door could
                       not continue a stream this tier's drain cuts (its holds, the release)
`

// checkConfigOptions are check-config's parsed arguments.
type checkConfigOptions struct {
	path, nodelist, batchNode, workers, jobID string
	upstreams                                 string
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
		fmt.Fprint(stdout, checkConfigUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "check-config: %v\n\n%s", err, checkConfigUsage)
		return 2
	}
	cfg, err := tier.LoadConfig(opts.path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	in, notes, err := opts.planInput(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "check-config: %v\n\n%s", err, checkConfigUsage)
		return 2
	}
	var out strings.Builder
	more, err := formatTier(&out, cfg, in)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", opts.path, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid\n\n%s", opts.path, out.String())
	notes = append(notes, more...)
	// The shared directory, as the job will check it at start (issue 23).
	what, _ := fsutil.DescribeDir(cfg.EndpointDir)
	notes = append(notes, fmt.Sprintf("endpoint_dir %s: %s", cfg.EndpointDir, what))
	note, warnings := checkContinuation(cfg, opts)
	notes = append(notes, note)
	for _, n := range notes {
		fmt.Fprintf(stdout, "\nnote: %s\n", n)
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "\nwarning: %s\n", w)
	}
	return 0
}

// formatTier writes what the tier runs on the allocation in: the plan of
// its job, or for an elastic tier, what its members run for each node
// count. It returns notes for the reader.
func formatTier(w io.Writer, cfg *tier.Config, in tier.PlanInput) ([]string, error) {
	if cfg.Elastic != nil {
		members, notes, err := cfg.ExampleMembers(in)
		if err != nil {
			return nil, err
		}
		return notes, tier.FormatElastic(w, cfg, members)
	}
	plan, err := cfg.Plan(in)
	if err != nil {
		return nil, err
	}
	return nil, tier.FormatPlan(w, plan)
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
	fs.StringVar(&opts.upstreams, "upstreams", "", "")
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

// planInput expands the hostlists of the options and lets the tier
// config build the allocation from them.
func (o *checkConfigOptions) planInput(cfg *tier.Config) (tier.PlanInput, []string, error) {
	a := tier.Allocation{BatchNode: o.batchNode, JobID: o.jobID, RestartCount: o.restartCount, Addrs: o.addrs}
	var err error
	if a.Nodes, err = slurm.ExpandHostlist(o.nodelist); err != nil {
		return tier.PlanInput{}, nil, fmt.Errorf("--nodelist: %w", err)
	}
	if o.workers != "" {
		if a.Workers, err = slurm.ExpandHostlist(o.workers); err != nil {
			return tier.PlanInput{}, nil, fmt.Errorf("--workers: %w", err)
		}
	}
	return cfg.PlanInput(a)
}
