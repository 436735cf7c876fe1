package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"slurm-llm/cmd/internal/doctor"
	"slurm-llm/supervisor/tier"
)

const doctorUsage = `usage: llm-supervisor doctor [--config TIER.toml ...] [--json]

Checks what this GPU node needs to run the tiers: munge (version, a credential's
round trip), Slurm (its commands, slurmctld), the firewall (the heads' ports reach
the controller; the rpc-server ports, which have no authentication, only the nodes),
and each tier's endpoint_dir and log_dir (there, real directories, not writable by
others), and a slot_save_dir's write speed (64 MiB written and synced: does it save a
full context within the drain's save share). One line per check, ok/WARN/FAIL, and the fix for each miss.
Without --config: every tier config in /etc/slurm-llm (a .toml with a top-level
tier key); name only the tiers this node runs with one --config each.
Exit status: 0 ready, 1 not ready (a FAIL), 2 usage or config error.

`

// configsFlag collects repeated --config.
type configsFlag []string

func (c *configsFlag) String() string { return strings.Join(*c, ",") }

func (c *configsFlag) Set(s string) error {
	*c = append(*c, s)
	return nil
}

// runDoctor is the doctor subcommand: args are those after "doctor".
func runDoctor(args []string, stdout, stderr io.Writer) int {
	var configs configsFlag
	fs := newFlagSet("doctor")
	fs.Var(&configs, "config", "a tier config whose directories and ports to check (repeat for each tier)")
	asJSON := fs.Bool("json", false, "print JSON instead of lines")
	err := parseFlags(fs, args, doctorUsage, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err == nil && len(configs) == 0 {
		configs, err = installedTierConfigs(defaultConfigDir)
		if err == nil {
			fmt.Fprintf(stderr, "llm-supervisor doctor: the tier configs in %s: %s\n", defaultConfigDir, strings.Join(configs, " "))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor doctor: %v\n\n%s", err, doctorUsage)
		return exitUsage
	}
	var node doctor.Node
	for _, path := range configs {
		cfg, err := tier.LoadConfig(path)
		if err != nil {
			fmt.Fprintf(stderr, "llm-supervisor doctor: %v\n", err)
			return exitUsage
		}
		addTier(&node, cfg)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rs := doctor.CheckNode(ctx, doctor.NewHost(doctor.SystemNames), node)
	if err := doctor.Write(stdout, rs, *asJSON); err != nil {
		fmt.Fprintf(stderr, "llm-supervisor doctor: %v\n", err)
		return exitGaveUp
	}
	if !doctor.Ready(rs) {
		return exitGaveUp // 1: not ready
	}
	return exitOK
}

// defaultConfigDir is where the packages and make install put the tier
// configs.
const defaultConfigDir = "/etc/slurm-llm"

// installedTierConfigs are the tier configs in dir (the .toml files with a
// top-level tier key, as check-shipped.sh tells them from upstreams.toml
// and keeper.toml), for a doctor run without --config.
func installedTierConfigs(dir string) ([]string, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, _, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "tier" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
				out = append(out, p)
				break
			}
			if strings.HasPrefix(strings.TrimSpace(line), "[") {
				break // past the top-level keys
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no tier config in %s: name one with --config TIER.toml (one per tier on this node)", dir)
	}
	return out, nil
}

// addTier adds a tier's directories and ports to what the doctor checks:
// the head's port, and every port a worker of the tier may listen on
// (port + i*port_step for each worker i; one port with step 0 or in an
// elastic tier, one member per node).
func addTier(n *doctor.Node, cfg *tier.Config) {
	n.EndpointDirs = append(n.EndpointDirs, cfg.EndpointDir)
	n.LogDirs = append(n.LogDirs, cfg.LogDir)
	if ss := cfg.Head.SlotSave; ss.Dir != "" {
		split := tier.Split(cfg.Kind, cfg.Timeouts, cfg.Drain, tier.ShimMargin).WithSaves()
		n.SlotSaves = append(n.SlotSaves, doctor.SlotSave{Tier: cfg.Tier, Dir: ss.Dir,
			NeedBytes: ss.NeedBytes(cfg.Head.Command), Share: split.Save})
	}
	if cfg.Head.Port > 0 {
		n.HeadPorts = append(n.HeadPorts, cfg.Head.Port)
	}
	if w := cfg.Worker; w != nil && w.Port > 0 {
		workers := 1
		if w.PortStep > 0 && cfg.Elastic == nil {
			workers = max(cfg.MinWorkers, 1)
		}
		for i := range workers {
			n.RPCPorts = append(n.RPCPorts, w.Port+i*w.PortStep)
		}
	}
}
