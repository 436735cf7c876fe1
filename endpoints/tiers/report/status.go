package report

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints/tiers"
)

// WriteStatus prints a report for people (a table per section) or, with
// asJSON, as one JSON document for tools.
func WriteStatus(w io.Writer, rep tiers.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tSERVED BY\tSERVERS\tFILE IN SYNC")
	for _, t := range rep.Tiers {
		by := t.ServedBy
		switch {
		case by == "":
			by = "none (503)"
		case by != t.Tier:
			by += " (backup)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Tier, by, orDash(strings.Join(t.Servers, " ")), yesNo(t.InSync))
	}
	writeViews(tw, rep.Views)
	// One line per endpoint file, so per replica of a tier with replicas
	// (the files are named <tier>-<job>.json: a tier's lines are together).
	fmt.Fprintln(tw, "\nFILE\tTIER\tJOB\tRESTART\tNODE\tSTATE\tIN FLIGHT\tADDRESS\tROUTED\tWHY")
	for _, d := range rep.Decisions {
		e := d.Endpoint
		why := d.Why
		if d.Unverified {
			why += " (unverified: scheduler check failed)"
		}
		inFlight := "-"
		if e.InFlight != nil {
			inFlight = strconv.Itoa(*e.InFlight)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.File, e.Tier, e.JobID, e.RestartCount, orDash(e.Node), e.State,
			inFlight, net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), yesNo(d.Live), why)
	}
	if len(rep.Scan.Rejected) > 0 {
		fmt.Fprintln(tw, "\nREJECTED FILE\tREASON")
		for _, r := range rep.Scan.Rejected {
			fmt.Fprintf(tw, "%s\t%s\n", r.File, r.Reason)
		}
	}
	if rep.TierQueueError != "" {
		fmt.Fprintf(tw, "\ntier jobs unknown (the scheduler did not answer): %s\n", rep.TierQueueError)
	}
	if rep.SchedulerError != "" {
		fmt.Fprintf(tw, "\nscheduler check failed (entries kept, unverified): %s\n", rep.SchedulerError)
		if rep.SchedulerRetry != "" {
			fmt.Fprintf(tw, "next scheduler check: %s\n", rep.SchedulerRetry)
		}
	}
	return tw.Flush()
}

// writeViews prints each tier's state, why, its job, the job that
// preempted it and when it is expected back.
func writeViews(tw io.Writer, views []tiers.TierView) {
	if len(views) == 0 {
		return
	}
	fmt.Fprintln(tw, "\nTIER\tSTATE\tREASON\tJOB\tPREEMPTED BY\tEXPECTED BACK\tRETRY-AFTER\tSTART TO READY")
	for _, v := range views {
		job := "-"
		if v.Job != "" {
			job = v.Job + " " + v.JobState
			if v.JobReason != "" && v.JobReason != "None" {
				job += " (" + v.JobReason + ")"
			}
		}
		by := "-"
		if p := v.Preemptor; p != nil {
			by = p.Job + " " + p.Name + " (" + p.Partition + ", "
			if p.End != nil {
				by += "ends " + p.End.UTC().Format(time.RFC3339) + ")"
			} else {
				by += "no time limit)"
			}
		}
		back := "unknown"
		switch {
		case v.State == tiers.StateRouted:
			back = "-"
		case v.ExpectedBack != nil:
			back = v.ExpectedBack.UTC().Format(time.RFC3339)
		}
		ready := "unmeasured"
		if v.ReadySamples > 0 {
			ready = fmt.Sprintf("%s (median of %d)", v.StartToReady, v.ReadySamples)
		}
		reason := tiers.OneLineReason(v.Reason)
		if v.Serving != "" {
			reason += ": serving on " + tiers.OneLineReason(v.Serving)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%ds\t%s\n", v.Tier, v.State, reason, job, by, back,
			v.RetryAfter, ready)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
