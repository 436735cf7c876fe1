// Command llm-upstreams turns the endpoint files that slurm-llm jobs publish
// into nginx upstream files, tests them with nginx -t and reloads nginx only
// when they change. Subcommands:
//
//	llm-upstreams sync   [--config FILE]           one pass (systemd timer)
//	llm-upstreams watch  [--config FILE]           passes on file events and every sweep
//	llm-upstreams front  [--config FILE]           the front door: one URL, routed by model in memory
//	llm-upstreams status [--config FILE] [--json]  what would be routed, and why
//	llm-upstreams report [--since 7d] [--json]     availability per tier, from watch's record
//	llm-upstreams keep …, llm-upstreams tier …     the keeper (keep.go)
//	llm-upstreams key create|list|revoke|generate  a user's API keys, made with munge (key.go)
//	llm-upstreams usage [--since 30d] [--by user]  what the front door served (usage.go)
//	llm-upstreams doctor [--config FILE] [--json]  what this controller still needs, with the fixes
//
// Exit codes: 0 success, 1 the pass or watch failed (doctor: not ready), 2
// usage or config error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/internal/cli"
	"slurm-llm/cmd/internal/journal"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/endpoints/keeper"
	"slurm-llm/endpoints/nginx"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/endpoints/tiers/report"
	"slurm-llm/slurm"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

const defaultConfig = "/etc/slurm-llm/upstreams.toml"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the flags shared by every subcommand.
type options struct {
	config   string
	asJSON   bool
	logLevel string
	logFmt   string
	// keeperConfig: status also shows the keeper's tiers from this file
	// when it exists ("" for never); nil means the config's keeper_config.
	keeperConfig *string
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: llm-upstreams sync|watch|front|status [--config FILE] [--json] [--log-level LEVEL] [--log-format text|json]\n"+
		"       llm-upstreams init [--config FILE]  (writes the upstream files nginx's site includes for tiers that have none yet; no nginx run)\n"+
		"       llm-upstreams status [--keeper-config FILE]  (text: also the keeper's tiers; default upstreams.toml's keeper_config)\n"+
		"       llm-upstreams report [--since 7d|36h|RFC3339] [--json] [--config FILE]  (availability per tier, from state_dir's record)\n"+
		"       llm-upstreams keep|tier … (see llm-upstreams keep --help, llm-upstreams tier --help)\n"+
		"       llm-upstreams key create|list|revoke|generate … (see llm-upstreams key --help)\n"+
		"       llm-upstreams usage [--since 30d] [--by user|account|model|tier] [--json] [--config FILE]\n"+
		"       llm-upstreams doctor [--config FILE] [--json]  (what this controller still needs, each miss with its fix; exit 1: not ready)\n"+
		"       llm-upstreams completion bash  (bash completion: source <(llm-upstreams completion bash))\n"+
		"       llm-upstreams --version\n")
}

// newFlagSet is a flag set whose errors go to stderr and whose usage is
// printed by parseFlags alone.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	return fs
}

// isHelp reports whether err is a request for help (-h, -help, --help).
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }

// printHelp answers -h/--help: the usage and the flags, on stdout, exit 0
// (as Go's tools and Slurm's commands do).
func printHelp(fs *flag.FlagSet, usage func(io.Writer), stdout io.Writer) int {
	usage(stdout)
	fmt.Fprintln(stdout, "\nflags:")
	cli.PrintFlags(stdout, fs)
	return exitOK
}

// commands are the subcommands run parses itself (keep, tier, key,
// usage and completion parse their own).
var commands = []string{"sync", "watch", "front", "status", "report", "init", "doctor"}

// checkLogFlags says what is wrong with --log-format or --log-level
// ("" when nothing is).
func checkLogFlags(format, level string) string {
	if format != "text" && format != "json" {
		return fmt.Sprintf("--log-format %q: want text or json", format)
	}
	if hclog.LevelFromString(level) == hclog.NoLevel {
		return fmt.Sprintf("--log-level %q: want trace, debug, info, warn or error", level)
	}
	return ""
}

// run parses args, builds the logger and updater and runs a subcommand.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintf(stdout, "llm-upstreams %s\n", version)
		return exitOK
	}
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		usage(stdout)
		return exitOK
	}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] { // the keeper's subcommands parse their own flags and config
	case "keep":
		return runKeep(args[1:], stdout, stderr)
	case "tier":
		return runTier(args[1:], stdout, stderr)
	case "key":
		return runKey(args[1:], stdout, stderr)
	case "usage":
		return runUsage(args[1:], stdout, stderr)
	case "completion":
		return runCompletion(args[1:], stdout, stderr)
	}
	cmd := args[0]
	if !slices.Contains(commands, cmd) { // before any flag or config is read
		fmt.Fprintf(stderr, "llm-upstreams: unknown command %q\n\n", cmd)
		usage(stderr)
		return exitUsage
	}
	fs := newFlagSet("llm-upstreams "+cmd, stderr)
	var o options
	fs.StringVar(&o.config, "config", defaultConfig, "config file")
	fs.BoolVar(&o.asJSON, "json", false, "status, report, doctor: print JSON")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn, error")
	fs.StringVar(&o.logFmt, "log-format", "text", "text or json (JSON lines)")
	keeperFlag := fs.String("keeper-config", "", "status: show the keeper's tiers from this config (\"\" for none) instead of upstreams.toml's keeper_config")
	since := fs.String("since", "7d", "report: the window's start, as 7d, 36h, 90m or an RFC 3339 time")
	err := fs.Parse(args[1:])
	if isHelp(err) {
		return printHelp(fs, usage, stdout)
	}
	if err != nil || fs.NArg() != 0 {
		usage(stderr)
		return exitUsage
	}
	if msg := checkLogFlags(o.logFmt, o.logLevel); msg != "" {
		fmt.Fprintf(stderr, "llm-upstreams %s: %s\n\n", cmd, msg)
		usage(stderr)
		return exitUsage
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "keeper-config" {
			o.keeperConfig = keeperFlag
		}
	})
	log := hclog.New(&hclog.LoggerOptions{Name: "llm-upstreams", Level: hclog.LevelFromString(o.logLevel),
		Output: journal.Wrap(stderr), JSONFormat: o.logFmt == "json"})
	cfg, err := config.Load(o.config)
	if err != nil {
		log.Error("config", "error", err)
		return exitUsage
	}
	switch cmd {
	case "sync":
		return runSync(cfg, log)
	case "watch":
		return runWatch(cfg, o.config, log)
	case "front":
		return runFront(cfg, o.config, log)
	case "status":
		return runStatus(cfg, o, log, stdout)
	case "init":
		return runInit(cfg, log, stdout)
	case "doctor":
		return runDoctor(cfg, o.asJSON, log, stdout)
	default: // report
		return runReport(cfg.Watcher, *since, o.asJSON, log, stdout)
	}
}

// newUpdater wires the real scheduler and resolver, and the consumers
// that take its passes (none for status, which only evaluates).
func newUpdater(cfg tiers.Config, log hclog.Logger, consumers ...tiers.Consumer) *tiers.Updater {
	warnUnsafeDir(cfg, log)
	opts := updaterOptions(cfg, log)
	opts.Consumers = consumers
	return tiers.New(cfg, opts)
}

// newSite is the watcher's nginx consumer.
func newSite(cfg nginx.Config, log hclog.Logger) *nginx.Site {
	return nginx.NewSite(cfg, generator(), nil, log)
}

// generator names this program in the files it writes.
func generator() string { return "llm-upstreams " + version }

// warnUnsafeDir warns when the endpoint directory is one others can
// write (or a symlink): every file is still checked, but anyone could
// squat a tier's file names there or flood it (issue 23). The tiers'
// jobs refuse to start on such a directory; the controller reads on, so
// that a fix on the job side is not an outage here.
func warnUnsafeDir(cfg tiers.Config, log hclog.Logger) {
	if err := fsutil.CheckShared(cfg.EndpointDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("the endpoint directory is not safe: the tiers' jobs will refuse it", "error", err)
	}
}

// updaterOptions are the real scheduler and queue (when the config asks
// Slurm) for an updater.
func updaterOptions(cfg tiers.Config, log hclog.Logger) tiers.Options {
	var sched tiers.Scheduler
	var queue tiers.Queue
	if cfg.Scheduler.Check {
		c := &slurm.Client{Timeout: cfg.Scheduler.Timeout}
		sched, queue = slurmJobs{c: c}, c
	}
	return tiers.Options{Log: log, Scheduler: sched, Queue: queue}
}

// runSync runs one pass.
func runSync(cfg config.Config, log hclog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rep, err := newUpdater(cfg.Watcher, log, newSite(cfg.Nginx, log)).Pass(ctx)
	if err != nil {
		return exitFailed
	}
	log.Info("pass done", "endpoints", len(rep.Decisions), "rejected", len(rep.Scan.Rejected),
		"changed", rep.Changed, "reloaded", rep.Reloaded, "duration", rep.Duration)
	return exitOK
}

// runInit writes the placeholder upstream files a fresh install needs
// before nginx loads the site (the packages' post-install step).
func runInit(cfg config.Config, log hclog.Logger, stdout io.Writer) int {
	wrote, err := nginx.WritePlaceholders(cfg.Nginx, cfg.TierSpecs(), cfg.EndpointDir, generator())
	for _, p := range wrote {
		fmt.Fprintf(stdout, "wrote %s (no live endpoint yet: 503 until a pass routes the tier)\n", p)
	}
	if err != nil {
		log.Error("init", "error", err)
		return exitFailed
	}
	return exitOK
}

// runWatch runs passes until SIGTERM or SIGINT; SIGHUP re-reads the config.
func runWatch(cfg config.Config, path string, log hclog.Logger) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	hup := make(chan struct{}, 1)
	go forwardSignals(ctx, sigs, cancel, hup, log)
	site := newSite(cfg.Nginx, log)
	u := newUpdater(cfg.Watcher, log, site)
	var hints *endpoints.Hints
	if cfg.HintListen != "" {
		h, err := endpoints.ListenHints(cfg.HintListen)
		if err != nil {
			log.Error("hints", "error", err)
			return exitFailed
		}
		defer h.Close()
		log.Info("listening for hints", "addr", h.Addr().String())
		hints = h
	}
	metricsErr := make(chan error, 1)
	if cfg.Metrics.Listen != "" {
		go func() { metricsErr <- ServeMetrics(ctx, cfg.Metrics.Listen, u.Metrics().Gatherer(), version) }()
	}
	watchErr := make(chan error, 1)
	go func() {
		notify, every := systemdNotifier(log)
		watchErr <- u.Watch(ctx, tiers.WatchOptions{Reload: hup, Hints: hints, Notify: notify, WatchdogInterval: every,
			LoadConfig: func() (tiers.Config, error) {
				c, err := config.Load(path)
				if err == nil {
					site.SetConfig(c.Nginx)
				}
				return c.Watcher, err
			}})
	}()
	select {
	case err := <-watchErr:
		return watchExit(err, log)
	case err := <-metricsErr:
		if err != nil {
			log.Error("metrics server", "error", err)
			cancel()
			<-watchErr
			return exitFailed
		}
		return watchExit(<-watchErr, log)
	}
}

// watchExit maps Watch's result to an exit code.
func watchExit(err error, log hclog.Logger) int {
	if err != nil {
		log.Error("watch", "error", err)
		return exitFailed
	}
	log.Info("stopped")
	return exitOK
}

// forwardSignals turns SIGTERM/SIGINT into cancel and SIGHUP into a reload.
func forwardSignals(ctx context.Context, sigs <-chan os.Signal, cancel func(), hup chan<- struct{}, log hclog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			if s != syscall.SIGHUP {
				log.Info("stopping", "signal", s.String())
				cancel()
				return
			}
			select {
			case hup <- struct{}{}:
			default: // a reload is already pending
			}
		}
	}
}

// runReport prints each tier's availability over the window from the
// availability record in state_dir.
func runReport(cfg tiers.Config, since string, asJSON bool, log hclog.Logger, stdout io.Writer) int {
	now := time.Now()
	from, err := report.ParseSince(since, now)
	if err != nil {
		log.Error("report", "error", err)
		return exitUsage
	}
	if cfg.StateDir == "" {
		log.Error("report: no state_dir in the config, so nothing is recorded", "config", cfg.Path)
		return exitFailed
	}
	events, bad, err := tiers.ReadRecord(cfg.StateDir)
	if err != nil {
		log.Error("report", "error", err)
		return exitFailed
	}
	rep := report.Availability(events, slices.Sorted(maps.Keys(cfg.Tiers)), from, now)
	rep.BadLines = bad
	if err := report.WriteAvailability(stdout, rep, asJSON); err != nil {
		log.Error("report", "error", err)
		return exitFailed
	}
	return exitOK
}

// runStatus prints what a pass would route, without writing anything, and
// (as text) the keeper's tiers when its config exists.
func runStatus(cfg config.Config, o options, log hclog.Logger, stdout io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rep, err := newUpdater(cfg.Watcher, log).Evaluate(ctx)
	if err != nil {
		log.Error("status", "error", err)
		return exitFailed
	}
	newSite(cfg.Nginx, log).Describe(&rep, nil, false)
	if err := report.WriteStatus(stdout, rep, o.asJSON); err != nil {
		log.Error("status", "error", err)
		return exitFailed
	}
	if !o.asJSON {
		writeFrontUsers(ctx, stdout, cfg.Front.MetricsListen)
	}
	path := cfg.KeeperConfig
	if o.keeperConfig != nil {
		path = *o.keeperConfig
	}
	if o.asJSON || path == "" {
		return exitOK // the keeper's JSON is `llm-upstreams keep status --json`
	}
	if _, err := os.Stat(path); err != nil {
		return exitOK // no keeper on this controller
	}
	kcfg, err := keeper.Load(path)
	if err != nil {
		log.Warn("keeper status", "error", err)
		return exitOK
	}
	fmt.Fprintf(stdout, "\nKEEPER (%s)\n", path)
	kopts := keeper.Options{Log: log}
	if uid, ok := kcfg.SubmitUID(); ok {
		kopts.Owner = &uid // the members' files are the tier account's, not the caller's (root)
	}
	k := keeper.New(kcfg, kopts)
	if err := keeper.WriteStatus(stdout, k.Status(ctx), time.Now(), false); err != nil {
		log.Error("keeper status", "error", err)
		return exitFailed
	}
	if err := keeper.WriteMembers(stdout, k.Members(), time.Now()); err != nil {
		log.Error("members status", "error", err)
		return exitFailed
	}
	return exitOK
}
