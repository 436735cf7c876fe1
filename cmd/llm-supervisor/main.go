// Command llm-supervisor runs one llama.cpp inference tier inside a Slurm
// job: started by the tier's sbatch script (`exec llm-supervisor run
// --config TIER.toml`), it starts the workers and the head as job steps,
// keeps them up, publishes the tier's endpoint file and stops everything in
// order when asked.
//
// Subcommands:
//
//	run --config TIER.toml      supervise a tier (inside a job)
//	status [--endpoint-dir DIR | --config TIER.toml] [--json]
//	                            list the published endpoints
//	check-config TIER.toml      validate a config and print its plan
//	doctor --config TIER.toml   what this node still needs, with the fixes
//	                            (exit 0 ready, 1 not ready, 2 usage)
//	shim --token T -- argv      (internal) wraps each step's process
//
// Exit codes (the sbatch script and Slurm see them):
//
//	0  clean stop: an ordered stop ended, every process is gone
//	1  gave up: the failure budget was spent or too few workers were left;
//	   the log's last error line says why
//	2  usage or config error: bad flags, invalid config, not inside a job
//	3  could not start supervising: the plan could not be built from the
//	   allocation (node addresses, ports) or Slurm could not be asked
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"slurm-llm/cmd/internal/cli"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit codes; see the package comment.
const (
	exitOK     = 0
	exitGaveUp = 1
	exitUsage  = 2
	exitSetup  = 3
)

const usage = `usage: llm-supervisor <command> [options]

commands:
  run --config TIER.toml [--log-format text|json] [--log-level LEVEL]
                         supervise a tier inside a Slurm job
  status [--endpoint-dir DIR | --config TIER.toml] [--json]
                         list the endpoints published in a directory
  check-config TIER.toml [options]
                         validate a config and print its plan (no Slurm needed)
  doctor --config TIER.toml [--config ...] [--json]
                         check what this node needs (munge, Slurm, firewall, directories)
                         and print the fix for each miss; exit 1 when not ready
  shim --token T [--grace D] -- PROGRAM ARGS...
                         (internal) hold one step's process through Slurm's signals
  --version              print the version
`

// newFlagSet returns a flag set for a subcommand that prints nothing on its
// own: errors are the caller's to print, and help goes through parseFlags.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args with fs. On -h or --help it writes usage and the
// flags' defaults to help (stdout: help is not an error, as with Go's tools
// and Slurm's) and returns flag.ErrHelp, on which the caller exits 0.
func parseFlags(fs *flag.FlagSet, args []string, usage string, help io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(help, usage)
		cli.PrintFlags(help, fs)
	}
	return err
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs the subcommand named by args[0] and returns the exit code.
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runRun(args[1:], stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "check-config":
		return runCheckConfig(args[1:], stdout, stderr)
	case "doctor":
		return runDoctor(args[1:], stdout, stderr)
	case "shim":
		return runShim(args[1:], stdin, stdout, stderr)
	case "--version", "-version", "version":
		fmt.Fprintf(stdout, "llm-supervisor %s\n", version)
		return exitOK
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "llm-supervisor: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}
