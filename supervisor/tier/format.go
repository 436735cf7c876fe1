package tier

import (
	"fmt"
	"io"
	"net"
	"path"
	"regexp"
	"strconv"
	"strings"

	"slurm-llm/endpoints"
)

// FormatPlan writes p for people (check-config, logs): the tier, where it
// publishes and logs, then each process with its node, role, step name,
// address and port, full argv (quoted for a POSIX shell), env and log path,
// and the settings in force.
func FormatPlan(w io.Writer, p *Plan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tier %s (%s), job %s, restart %d\n", p.Tier, p.Kind, p.JobID, p.RestartCount)
	fmt.Fprintf(&b, "  endpoint  %s  (file %s)\n", net.JoinHostPort(p.EndpointHost, strconv.Itoa(p.EndpointPort)),
		path.Join(p.EndpointDir, endpoints.FileName(p.Tier, p.JobID)))
	fmt.Fprintf(&b, "  logs      %s\n", p.LogDir)
	if p.Kind == KindDistributed {
		fmt.Fprintf(&b, "  workers   %d (min_workers %d)\n", len(p.Workers), p.MinWorkers)
	}
	if len(p.IdleNodes) > 0 {
		fmt.Fprintf(&b, "  unused    %s (nodes of the allocation that run nothing)\n", strings.Join(p.IdleNodes, ", "))
	}
	for _, proc := range p.Workers {
		formatProcess(&b, p, proc)
	}
	formatProcess(&b, p, p.Head)
	formatSettings(&b, p)
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("format plan: %w", err)
	}
	return nil
}

// formatProcess writes one process.
func formatProcess(b *strings.Builder, p *Plan, proc Process) {
	fmt.Fprintf(b, "\nprocess %s (%s)\n", proc.Name, proc.Role)
	fmt.Fprintf(b, "  node      %s\n", proc.Node)
	fmt.Fprintf(b, "  step      %s\n", proc.StepName)
	fmt.Fprintf(b, "  addr      %s  port %d\n", proc.Addr, proc.Port)
	fmt.Fprintf(b, "  srun      %s\n", shellJoin(append([]string{p.Srun}, proc.SrunArgs...)))
	fmt.Fprintf(b, "  argv      %s\n", shellJoin(proc.Argv))
	for _, k := range sortedKeys(proc.Env) {
		fmt.Fprintf(b, "  env       %s=%s\n", k, shellQuote(proc.Env[k]))
	}
	fmt.Fprintf(b, "  log       %s\n", proc.LogPath)
	if proc.Role == RoleWorker {
		ready := "(no ready_pattern: port check only)"
		if proc.ReadyPattern != "" {
			ready = fmt.Sprintf("output contains %q", proc.ReadyPattern)
		}
		fmt.Fprintf(b, "  ready     %s\n", ready)
	}
}

// formatSettings writes the timeouts, restart and drain settings.
func formatSettings(b *strings.Builder, p *Plan) {
	t, r, d := p.Timeouts, p.Restart, p.Drain
	fmt.Fprintf(b, "\ntimeouts  worker_start %s, load %s, health every %s (timeout %s), unhealthy after %s,\n"+
		"          hung after %s busy without progress, stop_grace %s, heartbeat %s, lease %s\n",
		t.WorkerStart, t.Load, t.HealthInterval, t.HealthTimeout, t.UnhealthyAfter, t.Stall, t.StopGrace, t.Heartbeat, t.Lease)
	fmt.Fprintf(b, "restart   backoff %s to %s ×%g, jitter %g, give up after %d failures in %s, reset after %s healthy,\n"+
		"          drop a worker node after %d failed starts\n",
		r.InitialBackoff, r.MaxBackoff, r.Multiplier, r.Jitter, r.MaxFailures, r.Window, r.ResetAfter, r.WorkerStartFailures)
	fmt.Fprintf(b, "drain     budget %s, in-flight poll %s, stop requeueing after %d failed runs\n",
		d.Budget, d.InFlightPoll, d.MaxFailedRuns)
	s := p.Split(ShimMargin)
	stop := fmt.Sprintf("stop the head %s", s.HeadStop)
	if s.WorkerStop > 0 {
		stop += fmt.Sprintf(", then the workers %s", s.WorkerStop)
	}
	if s.Save > 0 {
		stop = fmt.Sprintf("save the head's slots up to %s, ", s.Save) + stop
	}
	fmt.Fprintf(b, "          from the stop notice: requests in flight up to %s, %s, last resort %s;\n"+
		"          a shim holds Slurm's SIGTERM %s if the supervisor never says stop\n", s.InFlight, stop, s.Kill, s.ShimHold)
	if ss := p.SlotSave; ss.Dir != "" {
		fmt.Fprintf(b, "slots     saved at the drain into %s, kept %s, the directory bound to %d bytes (0: no bound)\n",
			ss.Dir, ss.TTL, ss.MaxBytes)
		if need := ss.NeedBytes(p.Head.Argv); need > 0 && s.Save > 0 {
			fmt.Fprintf(b, "          a full context (%d bytes) saved within %s needs %.0f MB/s of the directory (doctor measures it)\n",
				need, s.Save, float64(need)/s.Save.Seconds()/1e6)
		} else {
			fmt.Fprintf(b, "          set slot_save_bytes_per_token and -c to know the write speed a full context needs within %s\n", s.Save)
		}
	}
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellJoin quotes and joins argv so that it can be pasted into a shell.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
