package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/supervisor"
)

// statusOptions are the flags of the status subcommand.
type statusOptions struct {
	dir, config string
	json        bool
}

// parseStatusArgs reads status's flags: exactly one of --endpoint-dir and --config.
func parseStatusArgs(args []string, stderr io.Writer) (statusOptions, error) {
	var o statusOptions
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "endpoint-dir", "", "the endpoint directory to read")
	fs.StringVar(&o.config, "config", "", "a tier config whose endpoint_dir to read")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if (o.dir == "") == (o.config == "") || fs.NArg() > 0 {
		return o, errors.New("status needs one of --endpoint-dir DIR or --config TIER.toml")
	}
	return o, nil
}

// runStatus is the status subcommand: the published endpoints of a
// directory as a table (or JSON). It returns the exit code.
func runStatus(args []string, stdout, stderr io.Writer) int {
	o, err := parseStatusArgs(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor status: %v\n", err)
		return exitUsage
	}
	if o.config != "" {
		cfg, err := supervisor.LoadConfig(o.config)
		if err != nil {
			fmt.Fprintf(stderr, "llm-supervisor status: %v\n", err)
			return exitUsage
		}
		o.dir = cfg.EndpointDir
	}
	scan, err := endpoints.ReadDir(o.dir, endpoints.ReadOptions{})
	if err != nil {
		fmt.Fprintf(stderr, "llm-supervisor status: %v\n", err)
		return exitSetup
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(scan); err != nil {
			return exitSetup
		}
		return exitOK
	}
	writeStatusTable(stdout, scan, time.Now())
	return exitOK
}

// writeStatusTable prints one row per endpoint, sorted by tier then job,
// and one line per rejected file.
func writeStatusTable(w io.Writer, scan endpoints.Scan, now time.Time) {
	entries := append([]endpoints.Entry(nil), scan.Entries...)
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].Endpoint, entries[j].Endpoint
		if a.Tier != b.Tier {
			return a.Tier < b.Tier
		}
		return a.JobID < b.JobID
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tJOB\tRESTART\tADDRESS\tSTATE\tAGE\tLEASE LEFT\tMODELS")
	for _, en := range entries {
		e := en.Endpoint
		state := string(e.State)
		if e.Reason != "" && e.State != endpoints.StateReady {
			state += " (" + e.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Tier, e.JobID, e.RestartCount,
			hostPort(e.Host, e.Port), state, round(now.Sub(e.StartedAt)), leaseLeft(e, now), strings.Join(e.Models, ","))
	}
	tw.Flush()
	for _, r := range scan.Rejected {
		fmt.Fprintf(w, "rejected %s: %s\n", r.File, r.Reason)
	}
}

// hostPort joins host and port, bracketing IPv6 literals.
func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// leaseLeft is the time until the lease expires, or "expired".
func leaseLeft(e endpoints.Endpoint, now time.Time) string {
	left := e.LeaseExpires.Sub(now)
	if left <= 0 {
		return "expired"
	}
	return round(left)
}

// round prints a duration to the second.
func round(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}
