package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/slurm"
	"slurm-llm/supervisor"
	"slurm-llm/supervisor/elastic"
	"slurm-llm/supervisor/job"
	"slurm-llm/supervisor/shim"
	"slurm-llm/supervisor/tier"
)

// runOptions are the flags of the run subcommand.
type runOptions struct {
	config, logFormat, logLevel string
}

const runUsage = `usage: llm-supervisor run --config TIER.toml [--log-format text|json] [--log-level LEVEL]

Supervises a tier inside a Slurm job (the tier's sbatch script execs it).

`

// parseRunArgs reads run's flags; -h prints the help to stdout.
func parseRunArgs(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	fs := newFlagSet("run")
	fs.StringVar(&o.config, "config", "", "the tier config (TOML)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	if err := parseFlags(fs, args, runUsage, stdout); err != nil {
		return o, err
	}
	if o.config == "" || fs.NArg() > 0 {
		return o, errors.New("run needs --config TIER.toml and no other arguments")
	}
	return o, nil
}

// runRun is the run subcommand: supervise the tier until an ordered stop
// or until it gives up. It returns the exit code.
func runRun(args []string, stdout, stderr io.Writer) int {
	// Catch the stop signals first: one that arrives while the tier is
	// being planned is handled once the runner exists, not fatal.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	o, err := parseRunArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor run: %v\n\n%s", err, runUsage)
		return exitUsage
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor run: %v\n", err)
		return exitUsage
	}
	cfg, err := tier.LoadConfig(o.config)
	if err != nil {
		log.Error("invalid config", "config", o.config, "error", err)
		return exitUsage
	}
	alloc, err := slurm.AllocationFromEnv(os.Getenv)
	if err != nil {
		log.Error("cannot read the job's allocation", "error", err)
		return exitUsage
	}
	log = log.With("tier", cfg.Tier, "job", alloc.JobID)
	idle, err := idleExitFromEnv(os.Getenv)
	if err != nil {
		log.Error("invalid environment", "error", err)
		return exitUsage
	}
	if idle > 0 && cfg.Elastic != nil {
		log.Error("invalid environment", "error", fmt.Sprintf("%s is for extra replicas; an elastic tier's member has none", endpoints.IdleExitEnv))
		return exitUsage
	}
	if idle > 0 {
		log.Info("extra replica: ends after serving with nothing in flight", "idle_exit", idle)
	}
	if err := checkSharedDirs(cfg); err != nil {
		log.Error("unsafe shared directory: the tier does not start", "error", err)
		return exitUsage
	}
	return supervise(cfg, alloc, idle, sigs, log)
}

// checkSharedDirs checks, before anything starts, the directories of the
// shared file system the tier writes and trusts (issue 23): the endpoint
// directory, and an elastic tier's members/ and members/<tier>/ (made when
// missing) must be real directories of this job's account that others
// cannot write; another user's, a symlink or one anyone can write would let
// them squat the tier's file names, plant files, or swap term files.
func checkSharedDirs(cfg *tier.Config) error {
	uid := uint32(os.Getuid())
	if err := fsutil.CheckDir(cfg.EndpointDir, uid); err != nil {
		return fmt.Errorf("endpoint_dir: %w", err)
	}
	if cfg.Elastic != nil {
		if err := elastic.NewStore(cfg.EndpointDir, cfg.Tier, []uint32{uid}).EnsureDirs(); err != nil {
			return fmt.Errorf("the elastic tier's members directory: %w", err)
		}
	}
	return nil
}

// idleExitFromEnv reads SLURM_LLM_IDLE_EXIT, which the keeper sets on the
// jobs of extra replicas (a Go duration, at least 1s); unset or empty: 0.
func idleExitFromEnv(getenv func(string) string) (time.Duration, error) {
	v := getenv(endpoints.IdleExitEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("%s=%q: want a duration of at least 1s, like \"300s\"", endpoints.IdleExitEnv, v)
	}
	return d, nil
}

// supervise runs the tier of cfg in the job alloc under the job's life
// (supervisor/job): notices become an ordered stop, and what the notice's
// cause asks for follows it. It returns the exit code.
func supervise(cfg *tier.Config, alloc slurm.Allocation, idleExit time.Duration, sigs <-chan os.Signal, log hclog.Logger) int {
	client := &slurm.Client{}
	life := job.New(job.Options{Alloc: alloc, Slurm: client, Signals: sigs, Tier: cfg.Tier,
		RunState: job.RunStatePath(cfg.LogDir, cfg.Tier, alloc.JobID), MaxFailedRuns: cfg.Drain.MaxFailedRuns, Log: log})
	build := func() (job.Tier, error) { return newRunner(cfg, alloc, idleExit, client, life, log) }
	if cfg.Elastic != nil {
		build = func() (job.Tier, error) { return newMember(cfg, alloc, client, life, log) }
	}
	runner, err := build()
	if err != nil {
		log.Error("cannot plan the tier", "error", err)
		return exitSetup
	}
	restart := build
	if life.Run(context.Background(), runner, restart) == job.GaveUp {
		return exitGaveUp
	}
	return exitOK
}

// planTimeout bounds asking Slurm for the nodes' addresses and resolving
// them at start.
const planTimeout = 20 * time.Second

// newRunner plans the tier for the allocation and builds its runner with
// the srun launcher; Replan rebuilds the plan when a worker node is dropped.
func newRunner(cfg *tier.Config, alloc slurm.Allocation, idleExit time.Duration, client *slurm.Client, life *job.Life, log hclog.Logger) (*supervisor.Runner, error) {
	ctx, cancel := context.WithTimeout(context.Background(), planTimeout)
	defer cancel()
	plan, in, err := cfg.ForJob(ctx, tier.PlanInput{JobID: alloc.JobID, RestartCount: alloc.RestartCount,
		Nodes: alloc.Nodes, BatchNode: alloc.BatchNode},
		func(nodes []string) (map[string]string, error) { return client.NodeAddrs(ctx, nodes) },
		net.DefaultResolver.LookupIP)
	if err != nil {
		return nil, err
	}
	log.Info("plan", "kind", plan.Kind, "head", plan.Head.Node, "workers", len(plan.Workers),
		"endpoint", fmt.Sprintf("%s:%d", plan.EndpointHost, plan.EndpointPort), "restart_count", plan.RestartCount)
	launcher, err := srunLauncher(plan, client, life)
	if err != nil {
		return nil, err
	}
	return supervisor.New(plan, supervisor.Options{
		Launcher: launcher,
		Logger:   log,
		Observer: life.Observe,
		IdleExit: idleExit,
		Replan: func(workers []string) (*tier.Plan, error) {
			next := in
			next.Workers = workers
			return cfg.Plan(next)
		},
	})
}

// newMember builds the member runner of an elastic tier for a one-node
// job: its rpc-server and, when it leads, its head run on its node as
// steps; members find each other in <endpoint_dir>/members/<tier>.
func newMember(cfg *tier.Config, alloc slurm.Allocation, client *slurm.Client, life *job.Life, log hclog.Logger) (*elastic.Runner, error) {
	if len(alloc.Nodes) != 1 {
		return nil, fmt.Errorf("an elastic tier's member is a one-node job (sbatch -N1), this job has %d nodes", len(alloc.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), planTimeout)
	defer cancel()
	node := alloc.BatchNode
	addrs, err := cfg.NodeAddresses([]string{node}, func(nodes []string) (map[string]string, error) { return client.NodeAddrs(ctx, nodes) })
	if err == nil {
		addrs, err = tier.ResolveAddresses(ctx, addrs, net.DefaultResolver.LookupIP)
	}
	if err != nil {
		return nil, err
	}
	self := tier.Member{JobID: alloc.JobID, RestartCount: alloc.RestartCount, Node: node, Addr: addrs[node]}
	runID, err := supervisor.NewRunID()
	if err != nil {
		return nil, err
	}
	plan := &tier.Plan{Srun: cfg.Srun, Timeouts: cfg.Timeouts, Drain: cfg.Drain}
	launcher, err := srunLauncher(plan, client, life)
	if err != nil {
		return nil, err
	}
	log.Info("elastic member", "node", node, "addr", self.Addr, "members", cfg.Elastic.Members)
	return elastic.NewRunner(elastic.Options{
		Config: cfg, Self: self, RunID: runID,
		// Every member is a job of the same account (the keeper's): a
		// member or term file of another owner is ignored, so that write
		// access to the shared directory is not enough to join or lead.
		Files:      elastic.NewStore(cfg.EndpointDir, cfg.Tier, []uint32{uint32(os.Getuid())}).WithClock(time.Now, cfg.Elastic.Skew),
		Launcher:   launcher,
		StopMargin: tier.ShimMargin,
		Observer:   life.Observe,
		Log:        log.Named("member"),
		NewHead: func(p *tier.Plan, run elastic.HeadRun) (elastic.Head, error) {
			return supervisor.New(p, supervisor.Options{Launcher: launcher, Logger: log.Named("head"),
				Observer: life.Observe, Term: run.Term, Serving: run.Serving, RunID: run.RunID})
		},
	})
}

// srunLauncher starts each process as a step wrapped in this binary's shim
// (`llm-supervisor shim --token T --grace G -- argv`), so that Slurm's
// SIGTERM at preemption or cancel is held until the supervisor says stop.
func srunLauncher(plan *tier.Plan, client *slurm.Client, life *job.Life) (supervisor.SrunLauncher, error) {
	self, err := os.Executable()
	if err != nil {
		return supervisor.SrunLauncher{}, fmt.Errorf("find own binary for the shim: %w", err)
	}
	return supervisor.SrunLauncher{
		Srun:       plan.Srun,
		CancelStep: client.Cancel,
		Shim:       []string{self, "shim"},
		ShimGrace:  plan.Timeouts.StopGrace,
		ShimHold:   plan.Split(tier.ShimMargin).ShimHold,
		OnShimEvent: func(p tier.Process, ev shim.Event) {
			if ev.Kind == shim.EventSignal {
				life.StepSignalled()
			}
		},
	}, nil
}
