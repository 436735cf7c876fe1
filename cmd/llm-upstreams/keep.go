package main

// The keeper's subcommands: `llm-upstreams keep` keeps each enabled tier's
// Slurm job queued; `llm-upstreams tier` lets an admin disable and enable
// a tier. The policy lives in endpoints/keeper; this file only wires
// flags, signals, the logger and exit codes. Names here start with keep or
// tier so that they never meet the rest of package main.
//
//	llm-upstreams keep [--config FILE] [--once | --interval 30s]
//	llm-upstreams keep status [--config FILE] [--json]
//	llm-upstreams tier disable NAME [--cancel] [--config FILE]
//	llm-upstreams tier enable NAME [--config FILE]
//
// Every form also takes --log-format text|json and --log-level LEVEL.
// Exit codes: 0 success; 1 a tier's pass or the admin command failed
// (scheduler unavailable, sbatch or scancel failed, state not saved);
// 2 usage or config error, unknown tier, keep run by another account than
// submit_as.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/internal/journal"
	"slurm-llm/endpoints/keeper"
	"slurm-llm/endpoints/members"
)

// Exit codes of keep and tier (the same numbers as the rest of the binary).
const (
	keepExitOK     = 0
	keepExitFailed = 1
	keepExitUsage  = 2
)

const keepDefaultConfig = "/etc/slurm-llm/keeper.toml"

// keepDefaultInterval is the loop's interval when neither --once nor
// --interval is given.
const keepDefaultInterval = 30 * time.Second

// keepFlags are the flags every keep and tier form takes.
type keepFlags struct {
	config    string
	logFormat string
	logLevel  string
}

func (f *keepFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", keepDefaultConfig, "keeper config file")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn, error")
}

// setup builds the logger and loads the config; a non-zero code means
// stop with it (the problem is already printed).
func (f *keepFlags) setup(name string, stderr io.Writer) (keeper.Config, hclog.Logger, int) {
	if msg := checkLogFlags(f.logFormat, f.logLevel); msg != "" {
		fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		return keeper.Config{}, nil, keepExitUsage
	}
	log := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(f.logLevel), Output: journal.Wrap(stderr), JSONFormat: f.logFormat == "json"})
	cfg, err := keeper.Load(f.config)
	if err != nil {
		log.Error("config", "error", err)
		return keeper.Config{}, nil, keepExitUsage
	}
	return cfg, log, keepExitOK
}

func keepUsage(w io.Writer) {
	fmt.Fprint(w, "usage: llm-upstreams keep [--config FILE] [--once | --interval 30s] [--log-format text|json] [--log-level LEVEL]\n"+
		"       llm-upstreams keep status [--config FILE] [--json]\n")
}

func tierUsage(w io.Writer) {
	fmt.Fprint(w, "usage: llm-upstreams tier disable NAME [--cancel] [--config FILE] [--log-format text|json]\n"+
		"       llm-upstreams tier enable NAME [--config FILE] [--log-format text|json]\n"+
		"       llm-upstreams tier scale NAME [--min N] [--max M] [--config FILE] [--log-format text|json]\n"+
		"       llm-upstreams tier grow|handover NAME [--config FILE] [--log-format text|json]   (an elastic tier: now, not when idle)\n")
}

// keepParse parses args with fs, allowing flags after positional
// arguments ("disable fast --cancel"), and returns the positional ones.
func keepParse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// runKeep runs `llm-upstreams keep …`; args are what follows "keep". It
// runs one pass, one release check and one scale check (--once, by hand
// or from cron) or passes every --interval, with release checks (and
// scale checks, for tiers with replicas) between them, until
// SIGTERM or SIGINT (llm-keeper.service: under systemd it says
// READY=1, pings the watchdog from its loop and says STOPPING=1); `keep
// status` prints each tier's state.
func runKeep(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runKeepStatus(args[1:], stdout, stderr)
	}
	fs := newFlagSet("llm-upstreams keep", stderr)
	var f keepFlags
	f.register(fs)
	once := fs.Bool("once", false, "run one pass and exit")
	interval := fs.Duration("interval", 0, "run a pass this often until SIGTERM (default 30s)")
	rest, err := keepParse(fs, args)
	if isHelp(err) {
		return printHelp(fs, keepUsage, stdout)
	}
	if err != nil || len(rest) != 0 || (*once && *interval != 0) || *interval < 0 {
		keepUsage(stderr)
		return keepExitUsage
	}
	cfg, log, code := f.setup("keeper", stderr)
	if code != keepExitOK {
		return code
	}
	if err := cfg.CheckSubmitUser(os.Getuid()); err != nil {
		log.Error("refusing to run", "error", err)
		return keepExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := keeper.New(cfg, keeper.Options{Log: log})
	problems, err := k.CheckRoom(ctx)
	if err != nil {
		log.Warn("replicas' max not checked against the partition; going on", "error", err)
	}
	for _, p := range problems {
		log.Error("config", "error", p)
	}
	if len(problems) > 0 {
		return keepExitUsage
	}
	if problem, err := k.CheckRequeueHold(ctx); err != nil {
		log.Warn("requeue_hold_max not checked against Slurm's requeue hold; going on", "error", err)
	} else if problem != nil {
		log.Warn("config", "error", problem)
	}
	if *once {
		_, err := k.Pass(ctx)
		if err != nil {
			log.Error("pass had failures", "error", err)
		}
		res := k.Release(ctx)
		keeper.LogRelease(log, res)
		_, scaleErr := k.Scale(ctx)
		if scaleErr != nil {
			log.Error("scale check had failures", "error", scaleErr)
		}
		if err != nil || res.Err != nil || scaleErr != nil {
			return keepExitFailed
		}
		return keepExitOK
	}
	if *interval == 0 {
		*interval = keepDefaultInterval
	}
	log.Info("keeping tiers queued", "tiers", cfg.TierNames(), "interval", *interval)
	if cfg.MetricsListen != "" {
		go func() {
			if err := ServeMetrics(ctx, cfg.MetricsListen, k.Gatherer(), version); err != nil {
				log.Error("metrics server stopped; the keeper goes on without it", "error", err)
			}
		}()
		log.Info("serving metrics", "addr", cfg.MetricsListen)
	}
	notify, every := systemdNotifier(log)
	if err := k.Run(ctx, keeper.RunOptions{Interval: *interval, Notify: notify, WatchdogInterval: every}); err != nil {
		log.Error("keeper stopped", "error", err)
		return keepExitFailed
	}
	log.Info("stopped")
	return keepExitOK
}

// runKeepStatus prints every tier's state against a fresh squeue listing.
// It exits 0 even when squeue fails: the table says "unknown".
func runKeepStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("llm-upstreams keep status", stderr)
	var f keepFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	rest, err := keepParse(fs, args)
	if isHelp(err) {
		return printHelp(fs, keepUsage, stdout)
	}
	if err != nil || len(rest) != 0 {
		keepUsage(stderr)
		return keepExitUsage
	}
	cfg, log, code := f.setup("keeper", stderr)
	if code != keepExitOK {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := keeper.WriteStatus(stdout, keeper.New(cfg, keeper.Options{Log: log}).Status(ctx), time.Now(), *asJSON); err != nil {
		log.Error("status", "error", err)
		return keepExitFailed
	}
	return keepExitOK
}

// runTier runs `llm-upstreams tier disable|enable NAME`; args are what
// follows "tier".
func runTier(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("llm-upstreams tier", stderr)
	var f keepFlags
	f.register(fs)
	cancel := fs.Bool("cancel", false, "disable: also scancel the tier's jobs")
	minN := fs.Int("min", -1, "scale: replicas kept queued (persists, wins over the config)")
	maxN := fs.Int("max", -1, "scale: most replicas at once (persists, wins over the config)")
	rest, err := keepParse(fs, args)
	if isHelp(err) {
		return printHelp(fs, tierUsage, stdout)
	}
	scale := len(rest) == 2 && rest[0] == "scale"
	ask := len(rest) == 2 && (rest[0] == members.RequestGrow || rest[0] == members.RequestHandover)
	if err != nil || len(rest) != 2 || (rest[0] != "disable" && rest[0] != "enable" && !scale && !ask) || (*cancel && rest[0] != "disable") ||
		(scale != (*minN >= 0 || *maxN >= 0)) {
		tierUsage(stderr)
		return keepExitUsage
	}
	cfg, log, code := f.setup("keeper", stderr)
	if code != keepExitOK {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := keeper.New(cfg, keeper.Options{Log: log})
	verb, tier := rest[0], rest[1]
	if scale {
		return tierExit(log, k.ScaleTier(ctx, tier, *minN, *maxN), func() {
			fmt.Fprintf(stdout, "tier %s scaled: %s\n", tier, scaleText(*minN, *maxN))
		})
	}
	if ask {
		return tierExit(log, k.AskLeader(tier, verb), func() {
			fmt.Fprintf(stdout, "asked the leader of tier %s to %s now (draining first); it acts within a tick: watch `llm-upstreams status`\n", tier, verb)
		})
	}
	if verb == "enable" {
		return tierExit(log, k.EnableTier(ctx, tier), func() { fmt.Fprintf(stdout, "tier %s enabled\n", tier) })
	}
	cancelled, err := k.DisableTier(ctx, tier, *cancel)
	for _, id := range cancelled {
		fmt.Fprintf(stdout, "job %s cancelled\n", id)
	}
	return tierExit(log, err, func() { fmt.Fprintf(stdout, "tier %s disabled\n", tier) })
}

// tierExit maps an admin command's error to an exit code, and says what
// was done on success.
func tierExit(log hclog.Logger, err error, done func()) int {
	switch {
	case errors.Is(err, keeper.ErrUnknownTier):
		log.Error("tier", "error", err)
		return keepExitUsage
	case err != nil:
		log.Error("tier", "error", err)
		return keepExitFailed
	}
	done()
	return keepExitOK
}

// scaleText says which bounds `tier scale` set.
func scaleText(minN, maxN int) string {
	var parts []string
	if minN >= 0 {
		parts = append(parts, fmt.Sprintf("min %d", minN))
	}
	if maxN >= 0 {
		parts = append(parts, fmt.Sprintf("max %d", maxN))
	}
	return strings.Join(parts, ", ")
}
