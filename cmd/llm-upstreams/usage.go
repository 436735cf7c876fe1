package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	usagedb "slurm-llm/endpoints/access/usage"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/tiers/report"
)

func usageUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: llm-upstreams usage [--since 30d|36h|RFC3339] [--by user|account|model|tier] [--json] [--config FILE]\n"+
		"  what the front door served, from [front.usage] database (read-only), shaped like sreport's tables\n")
}

// runUsage is `llm-upstreams usage`: tokens and requests per user,
// account, model or tier since a time, from the usage database.
func runUsage(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("llm-upstreams usage", stderr)
	configPath := fs.String("config", defaultConfig, "config file")
	since := fs.String("since", "30d", "the window's start: 30d, 36h, 90m or an RFC 3339 time")
	by := fs.String("by", "user", "group by user (and account), account, model (and tier) or tier")
	asJSON := fs.Bool("json", false, "print JSON")
	err := fs.Parse(args)
	if isHelp(err) {
		return printHelp(fs, usageUsage, stdout)
	}
	if err != nil || fs.NArg() != 0 {
		usageUsage(stderr)
		return exitUsage
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "llm-upstreams", Output: stderr})
	grouping, err := usagedb.ParseBy(*by)
	if err != nil {
		log.Error("usage", "error", err)
		return exitUsage
	}
	now := time.Now()
	from, err := report.ParseSince(*since, now)
	if err != nil {
		log.Error("usage", "error", err)
		return exitUsage
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		log.Error("config", "error", err)
		return exitUsage
	}
	path := cfg.Front.Access.Usage.Database
	if path == "" {
		log.Error("usage: no [front.usage] database and no state_dir in the config, so nothing is recorded", "config", cfg.Path)
		return exitFailed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := usagedb.OpenReadOnly(path)
	if err != nil {
		log.Error("usage", "error", err)
		return exitFailed
	}
	defer db.Close()
	rep, err := usagedb.Summarize(ctx, db, grouping, from, now)
	if err != nil {
		log.Error("usage", "database", path, "error", err)
		return exitFailed
	}
	if err := usagedb.WriteReport(stdout, rep, *asJSON); err != nil {
		log.Error("usage", "error", err)
		return exitFailed
	}
	return exitOK
}
