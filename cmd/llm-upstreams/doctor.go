package main

import (
	"context"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/internal/doctor"
	"slurm-llm/endpoints/config"
)

// runDoctor checks what this controller needs (SELinux, nginx, the
// firewall, munge, Slurm, the config's directories, systemd) and prints
// a line per check with the fix for each miss: exit 0 ready, 1 not.
func runDoctor(cfg config.Config, asJSON bool, log hclog.Logger, stdout io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rs := doctor.CheckController(ctx, doctor.NewHost(doctor.SystemNames), doctorController(cfg))
	if err := doctor.Write(stdout, rs, asJSON); err != nil {
		log.Error("doctor", "error", err)
		return exitFailed
	}
	if !doctor.Ready(rs) {
		return exitFailed
	}
	return exitOK
}

// doctorController is what the doctor takes from upstreams.toml.
func doctorController(cfg config.Config) doctor.Controller {
	c := doctor.Controller{EndpointDir: cfg.EndpointDir, OutputDir: cfg.Nginx.OutputDir,
		StateDirs: []string{cfg.StateDir}, HintListen: cfg.HintListen, Nginx: cfg.Nginx.Test}
	if !cfg.AllowAnyOwner {
		c.AllowedOwners = cfg.AllowedOwners
	}
	if f := cfg.Front; f.Listen != "" {
		c.StateDirs = append(c.StateDirs, f.StateDir)
		c.FrontListen, c.FrontHintListen = f.Listen, f.HintListen
		var why []string
		if f.Access.Auth.Mode != "off" && f.Access.Auth.SlurmAccounts {
			why = append(why, "[front.auth] slurm_accounts")
		}
		if f.Access.FairShare.Enabled && f.Access.FairShare.Weights == "sshare" {
			why = append(why, `[front.fair_share] weights = "sshare"`)
		}
		c.NeedAccounts, c.Why = len(why) > 0, strings.Join(why, " and ")
	}
	return c
}
