package main

import (
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
	"golang.org/x/sys/unix"

	"slurm-llm/supervisor/shim"
)

const shimUsage = `usage: llm-supervisor shim --token T [--hold D] [--grace D] [--stop-signal SIG] [--unshielded] [--port P] [--lease-until T] -- COMMAND [ARG...]

Runs COMMAND as a child held through Slurm's stop signals: on SIGTERM the shim
writes a marker line to stderr and keeps COMMAND running until "stop" (or
"stop-now") arrives on stdin or the hold passes, then sends the stop signal to
COMMAND's process group, waits the grace, and sends SIGKILL. Exits with
COMMAND's status (its code, or 128+signal).
`

// runShim is the "shim" subcommand: parse flags, catch the stop signals,
// run the shim, return its exit status.
func runShim(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, level, err := parseShimFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor shim: %v\n%s", err, shimUsage)
		return 2
	}
	lw := shim.NewLineWriter(stderr)
	cfg.Stdin, cfg.Stdout, cfg.Stderr = stdin, stdout, lw
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "shim", Output: lw, Level: level})
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	return shim.Run(cfg)
}

// parseShimFlags reads the shim's flags and the command after "--"; -h
// prints the help to stdout.
func parseShimFlags(args []string, stdout io.Writer) (shim.Config, hclog.Level, error) {
	var cfg shim.Config
	var stopSig, level string
	fs := newFlagSet("shim")
	fs.StringVar(&cfg.Token, "token", "", "marker token for this run (required)")
	fs.DurationVar(&cfg.Hold, "hold", shim.DefaultHold, "after SIGTERM, keep the child this long unless told to stop (0: no hold)")
	fs.DurationVar(&cfg.Grace, "grace", shim.DefaultGrace, "after the stop signal, SIGKILL the child after this long")
	fs.StringVar(&stopSig, "stop-signal", "SIGINT", "signal that asks the child to stop (SIGTERM is blocked in a shielded child)")
	fs.BoolVar(&cfg.Unshielded, "unshielded", false, "do not block SIGTERM in the child")
	fs.StringVar(&level, "log-level", "info", "log level of the shim's own messages")
	fs.Func("lease-until", "kill COMMAND at this time (RFC 3339, this node's clock) unless the supervisor renews the lease (\"lease T\" on stdin) to a later one (unset: no lease)", func(v string) error {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("want an RFC 3339 time: %w", err)
		}
		cfg.LeaseUntil = t
		return nil
	})
	fs.IntVar(&cfg.Port, "port", 0, "the TCP port COMMAND listens on: refuse to start it while another process holds the port, report when it holds it (0: no check)")
	if err := parseFlags(fs, args, shimUsage+"\n", stdout); err != nil {
		return cfg, 0, err
	}
	if cfg.Hold <= 0 {
		cfg.Hold = -1 // shim.Config: negative is no hold, zero the default
	}
	cfg.Argv = fs.Args()
	if len(cfg.Argv) == 0 {
		return cfg, 0, errors.New("no command after --")
	}
	sig := unix.SignalNum(strings.ToUpper(ensureSIG(stopSig)))
	if sig == 0 {
		return cfg, 0, fmt.Errorf("unknown --stop-signal %q", stopSig)
	}
	cfg.StopSignal = sig
	if cfg.Grace <= 0 {
		return cfg, 0, fmt.Errorf("--grace must be positive, got %v", cfg.Grace)
	}
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return cfg, 0, fmt.Errorf("unknown --log-level %q", level)
	}
	return cfg, lvl, nil
}

// ensureSIG accepts "INT" as well as "SIGINT".
func ensureSIG(s string) string {
	if strings.HasPrefix(strings.ToUpper(s), "SIG") {
		return s
	}
	return "SIG" + s
}
