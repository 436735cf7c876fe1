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

	"slurm-llm/slurm"
	"slurm-llm/supervisor"
	"slurm-llm/supervisor/shim"
)

// runOptions are the flags of the run subcommand.
type runOptions struct {
	config, logFormat, logLevel string
}

// parseRunArgs reads run's flags.
func parseRunArgs(args []string, stderr io.Writer) (runOptions, error) {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "the tier config (TOML)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.config == "" || fs.NArg() > 0 {
		return o, errors.New("run needs --config TIER.toml and no other arguments")
	}
	return o, nil
}

// runRun is the run subcommand: supervise the tier until an ordered stop
// or until it gives up. It returns the exit code.
func runRun(args []string, stderr io.Writer) int {
	// Catch the stop signals first: one that arrives while the tier is
	// being planned is handled once the runner exists, not fatal.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	o, err := parseRunArgs(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor run: %v\n", err)
		return exitUsage
	}
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor run: %v\n", err)
		return exitUsage
	}
	cfg, err := supervisor.LoadConfig(o.config)
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
	return supervise(cfg, alloc, sigs, log)
}

// supervise runs the tier of cfg in the job alloc: notices (signals, shim
// markers, the periodic job check) become an ordered stop, and what the
// notice's cause asks for follows it.
func supervise(cfg *supervisor.Config, alloc slurm.Allocation, sigs <-chan os.Signal, log hclog.Logger) int {
	client := &slurm.Client{}
	notices := make(chan notice, 1)
	runner, runs, err := newRunner(cfg, alloc, client, notices, log)
	if err != nil {
		log.Error("cannot plan the tier", "error", err)
		return exitSetup
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	st := &stopper{runner: runner, classify: slurmClassifier(client, alloc), log: log}
	tick := time.NewTicker(jobPollEvery)
	defer tick.Stop()
	poll := jobPoll{show: func(ctx context.Context) (slurm.JobInfo, error) { return client.ShowJob(ctx, alloc.JobID) },
		runRestarts: alloc.RestartCount, tick: tick.C, log: log}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := watchNotices(watchCtx, sigs, notices, st, poll)
	err = runner.Run(ctx)
	stopWatch()
	<-watchDone // afterDrain reads the signals from here on
	if err != nil {
		// The runner logged the one "gave up" line with its reason.
		runs.end(supervisor.CauseUnknown)
		return exitGaveUp
	}
	return afterDrain(ctx, st, runs, cfg.Drain.MaxFailedRuns, client, alloc, sigs, log)
}

// watchNotices hands every notice to the stopper until ctx ends; the
// returned channel closes once its goroutines are gone.
func watchNotices(ctx context.Context, sigs <-chan os.Signal, notices chan notice, st *stopper, poll jobPoll) <-chan struct{} {
	done := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		poll.run(ctx, notices)
	}()
	go func() {
		defer close(done)
		readNotices(ctx, sigs, notices, st)
		<-pollDone
	}()
	return done
}

// readNotices hands every signal and shim notice to the stopper, in order,
// until ctx ends. A classification under way when ctx ends is finished (it
// has its own timeout): what follows the drain depends on it, and the
// drain can end within milliseconds of the notice.
func readNotices(ctx context.Context, sigs <-chan os.Signal, shims <-chan notice, st *stopper) {
	hctx := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			st.handle(hctx, notice{signal: signalName(sig)})
		case n := <-shims:
			st.handle(hctx, n)
		}
	}
}

// jobControl is what afterDrain needs of Slurm (slurm.Client).
type jobControl interface {
	ShowJob(ctx context.Context, id string) (slurm.JobInfo, error)
	Requeue(ctx context.Context, id string) error
}

// afterDrain does what the notice's classification says follows the
// drain, and returns the exit code: requeue the job (only once every
// process is stopped, and exit only once Slurm shows it requeued), wait
// for Slurm's own SIGTERM (a preempted batch script that exits early is
// never requeued), or just exit.
func afterDrain(ctx context.Context, st *stopper, runs *runRecord, maxFailedRuns int, jobs jobControl,
	alloc slurm.Allocation, sigs <-chan os.Signal, log hclog.Logger) int {
	d, ok := st.after()
	if !ok {
		runs.end(supervisor.CauseShutdown)
		return exitOK
	}
	state := runs.end(d.Cause)
	switch d.After {
	case supervisor.AfterRequeue:
		if ok, why := supervisor.ShouldRequeue(state, maxFailedRuns); !ok {
			log.Error("not requeueing the job: the tier keeps failing to become ready", "reason", why)
			return exitGaveUp
		}
		if err := requeueJob(ctx, jobs, alloc, requeueRetry, log); err != nil {
			log.Error("cannot requeue the job: waiting for Slurm to end or requeue it", "error", err)
			waitForSlurm(ctx, jobs, alloc, sigs, waitPoll, log)
		}
	case supervisor.AfterWait:
		log.Info("waiting for Slurm to end the job")
		waitForSlurm(ctx, jobs, alloc, sigs, waitPoll, log)
	}
	return exitOK
}

// waitPoll is how often a supervisor waiting for Slurm looks at its job.
const waitPoll = time.Second

// waitForSlurm blocks until Slurm's next signal, or until the job shows it
// is ending or requeued (its SIGTERM may have come already, as a notice).
func waitForSlurm(ctx context.Context, jobs jobControl, alloc slurm.Allocation, sigs <-chan os.Signal, every time.Duration, log hclog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case sig := <-sigs:
			log.Info("signal: exiting", "signal", signalName(sig))
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, jobPollTimeout)
		info, err := jobs.ShowJob(cctx, alloc.JobID)
		cancel()
		if err == nil && (info.State != slurm.JobRunning || info.Restarts > alloc.RestartCount) {
			log.Info("Slurm is ending the job: exiting", "state", info.State, "restarts", info.Restarts)
			return
		}
	}
}

// resolveTimeout bounds the name lookups of the nodes' addresses at start.
const resolveTimeout = 10 * time.Second

// newRunner plans the tier for the allocation and builds its runner with
// the srun launcher; Replan rebuilds the plan when a worker node is dropped.
func newRunner(cfg *supervisor.Config, alloc slurm.Allocation, client *slurm.Client, notices chan<- notice, log hclog.Logger) (*supervisor.Runner, *runRecord, error) {
	addrs, err := cfg.NodeAddresses(alloc.Nodes, func(nodes []string) (map[string]string, error) {
		return client.NodeAddrs(context.Background(), nodes)
	})
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	addrs, err = supervisor.ResolveAddresses(rctx, addrs, net.DefaultResolver.LookupIP)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	in := supervisor.PlanInput{JobID: alloc.JobID, RestartCount: alloc.RestartCount,
		Nodes: alloc.Nodes, BatchNode: alloc.BatchNode, Addrs: addrs}
	plan, err := cfg.Plan(in)
	if err != nil {
		return nil, nil, err
	}
	log.Info("plan", "kind", plan.Kind, "head", plan.Head.Node, "workers", len(plan.Workers),
		"endpoint", fmt.Sprintf("%s:%d", plan.EndpointHost, plan.EndpointPort), "restart_count", plan.RestartCount)
	launcher, err := srunLauncher(plan, client, notices)
	if err != nil {
		return nil, nil, err
	}
	runs := beginRun(supervisor.RunStatePath(cfg.LogDir, cfg.Tier, alloc.JobID), cfg.Tier, alloc.JobID, alloc.RestartCount, log)
	r, err := supervisor.New(plan, supervisor.Options{
		Launcher: launcher,
		Logger:   log,
		Observer: runs.observe,
		Replan: func(workers []string) (*supervisor.Plan, error) {
			next := in
			next.Workers = workers
			return cfg.Plan(next)
		},
	})
	return r, runs, err
}

// srunLauncher starts each process as a step wrapped in this binary's shim
// (`llm-supervisor shim --token T --grace G -- argv`), so that Slurm's
// SIGTERM at preemption or cancel is held until the supervisor says stop.
func srunLauncher(plan *supervisor.Plan, client *slurm.Client, notices chan<- notice) (supervisor.SrunLauncher, error) {
	self, err := os.Executable()
	if err != nil {
		return supervisor.SrunLauncher{}, fmt.Errorf("find own binary for the shim: %w", err)
	}
	return supervisor.SrunLauncher{
		Srun:       plan.Srun,
		CancelStep: client.Cancel,
		Shim:       []string{self, "shim"},
		ShimGrace:  plan.Timeouts.StopGrace,
		ShimHold:   shimHold(plan),
		OnShimEvent: func(p supervisor.Process, ev shim.Event) {
			if ev.Kind != shim.EventSignal {
				return
			}
			select { // never block a step's output; one notice is enough
			case notices <- notice{}:
			default:
			}
		},
	}, nil
}

// shimHold is how long a step's shim holds its child through Slurm's
// SIGTERM when the supervisor never says stop (it hung or died): the drain
// budget minus the child's stop grace, so that even then every process is
// gone within the budget, before Slurm's own end of the grace.
func shimHold(plan *supervisor.Plan) time.Duration {
	// Config validation keeps the budget above twice the grace: positive.
	return plan.Drain.Budget - plan.Timeouts.StopGrace
}
