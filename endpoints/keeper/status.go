package keeper

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"slurm-llm/slurm"
)

// TierStatus is what `keep status` shows about one tier: its saved state
// seen against a fresh squeue listing, and what the next pass would do.
type TierStatus struct {
	Tier    string
	JobName string
	// Enabled is whether the tier is kept queued; EnabledBy is "admin" or
	// "config".
	Enabled   bool
	EnabledBy string
	// Jobs is the live listing; SchedulerError is set instead when squeue
	// did not answer.
	Jobs           []slurm.JobRef
	SchedulerError string
	// StateError is set when the state file could not be read.
	StateError string
	// State is the saved state with the listing folded in (not saved).
	State TierState
	// BackoffUntil is when the backoff or hourly cap ends; zero if over.
	BackoffUntil time.Time
	// Next is what a pass would do now.
	Next Decision
	// Replicas, for a tier with [replicas]: its min and max (an admin's
	// `tier scale` applied), its jobs (kept and extra) with their endpoint
	// files, what the last scale check said, and ReplicasError when the
	// scheduler or the endpoint directory did not answer.
	Replicas      *Replicas
	ReplicaList   []Replica
	LastScale     string
	ReplicasError string
}

// Status reports every tier in name order. It asks squeue once per tier
// (and, when a tier has replicas, gathers the scale check's facts once for
// all of them) and writes nothing; a tier whose state or listing failed
// says so in its entry.
func (k *Keeper) Status(ctx context.Context) []TierStatus {
	var out []TierStatus
	var facts *ScaleFacts
	for _, name := range k.cfg.TierNames() {
		tc := k.cfg.Tiers[name]
		if tc.Replicas.Max > 0 && facts == nil {
			f := k.gatherScale(ctx)
			facts = &f
		}
		out = append(out, k.tierStatus(ctx, tc, facts))
	}
	return out
}

// tierStatus is one tier's entry; facts are the scale check's (nil for a
// tier without replicas).
func (k *Keeper) tierStatus(ctx context.Context, tc TierConfig, facts *ScaleFacts) TierStatus {
	ts := TierStatus{Tier: tc.Name, JobName: tc.JobName}
	st, err := k.store.Load(tc.Name)
	if err != nil {
		ts.StateError = err.Error()
	}
	now := k.now()
	jobs, listErr := k.sched.JobsByName(ctx, tc.JobName)
	if listErr != nil {
		ts.SchedulerError = listErr.Error()
	} else {
		ts.Jobs = jobs
		st = Observe(tc, st, jobs, now)
	}
	ts.Enabled, ts.EnabledBy, ts.State = st.IsEnabled(tc), st.EnabledBy(), st
	if until, _ := holdUntil(tc, st, now); until.After(now) {
		ts.BackoffUntil = until
	}
	if tc.Replicas.Max > 0 {
		tc = effectiveTier(tc, st)
		rep := tc.Replicas
		ts.Replicas, ts.LastScale = &rep, st.Scale
		if facts.Err != nil {
			ts.ReplicasError = facts.Err.Error()
		} else {
			ts.ReplicaList = facts.Replicas(tc, k.owner)
		}
	}
	ts.Next = Decide(tc, st, jobs, listErr, now)
	if err != nil {
		ts.Next = Decision{Action: ActionUnknown, Reason: "state unreadable: " + err.Error()}
	}
	return ts
}

// statusJSON is one tier in `keep status --json`: times in RFC 3339 UTC,
// "" when unset.
type statusJSON struct {
	Tier             string   `json:"tier"`
	JobName          string   `json:"job_name"`
	Enabled          bool     `json:"enabled"`
	EnabledBy        string   `json:"enabled_by"`
	Jobs             []jobRef `json:"jobs"`
	SchedulerError   string   `json:"scheduler_error,omitempty"`
	StateError       string   `json:"state_error,omitempty"`
	LastJobID        string   `json:"last_job_id,omitempty"`
	LastSubmit       string   `json:"last_submit"`
	SubmitsLastHour  int      `json:"submits_last_hour"`
	UnhealthySubmits int      `json:"unhealthy_submits"`
	RunningSince     string   `json:"running_since"`
	BackoffUntil     string   `json:"backoff_until"`
	Next             string   `json:"next"`
	NextReason       string   `json:"next_reason"`
	LastError        string   `json:"last_error,omitempty"`
	LastErrorAt      string   `json:"last_error_at"`
	// Replicas is set for a tier with [replicas].
	Replicas *replicasJSON `json:"replicas,omitempty"`
}

type replicasJSON struct {
	Min       int       `json:"min"`
	Max       int       `json:"max"`
	Jobs      []Replica `json:"jobs"`
	LastScale string    `json:"last_scale,omitempty"`
	Error     string    `json:"error,omitempty"`
}

type jobRef struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// WriteStatus prints statuses as a table, or as a JSON array with asJSON.
// now dates "submits in the last hour".
func WriteStatus(w io.Writer, statuses []TierStatus, now time.Time, asJSON bool) error {
	rows := make([]statusJSON, 0, len(statuses))
	for _, ts := range statuses {
		rows = append(rows, toJSON(ts, now))
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
		return nil
	}
	return writeTable(w, rows)
}

func toJSON(ts TierStatus, now time.Time) statusJSON {
	st := ts.State
	r := statusJSON{Tier: ts.Tier, JobName: ts.JobName, Enabled: ts.Enabled, EnabledBy: ts.EnabledBy,
		Jobs: []jobRef{}, SchedulerError: ts.SchedulerError, StateError: ts.StateError,
		LastJobID: st.JobID, LastSubmit: stamp(st.LastSubmit), SubmitsLastHour: len(recentSubmits(st.Submits, now)),
		UnhealthySubmits: st.Unhealthy, RunningSince: stamp(st.RunningSince), BackoffUntil: stamp(ts.BackoffUntil),
		Next: string(ts.Next.Action), NextReason: ts.Next.Reason, LastError: st.LastError, LastErrorAt: stamp(st.LastErrorAt)}
	for _, j := range ts.Jobs {
		r.Jobs = append(r.Jobs, jobRef{ID: j.ID, State: string(j.State)})
	}
	if ts.Replicas != nil {
		r.Replicas = &replicasJSON{Min: ts.Replicas.Min, Max: ts.Replicas.Max, Jobs: ts.ReplicaList,
			LastScale: ts.LastScale, Error: ts.ReplicasError}
		if r.Replicas.Jobs == nil {
			r.Replicas.Jobs = []Replica{}
		}
	}
	return r
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// writeTable prints one line per tier, columns aligned.
func writeTable(w io.Writer, rows []statusJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tENABLED\tJOB\tLAST SUBMIT\tBACKOFF UNTIL\tNEXT\tLAST ERROR")
	for _, r := range rows {
		enabled := "no"
		if r.Enabled {
			enabled = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\t%s\t%s\n", r.Tier, enabled, r.EnabledBy, jobsText(r),
			dash(r.LastSubmit), dash(r.BackoffUntil), nextText(r), lastError(r))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	for _, r := range rows {
		if r.Replicas != nil {
			writeReplicas(w, r.Tier, *r.Replicas)
		}
	}
	return nil
}

// writeReplicas prints a tier's replicas under the table:
//
//	fast: replicas min 1, max 3; last scale check: nothing: 0 in flight on 2 routed replicas (grows above 2 each)
//	  10        kept   RUNNING  node1  ready     in flight 0
//	  11        extra  RUNNING  node2  starting  in flight -
func writeReplicas(w io.Writer, tier string, r replicasJSON) {
	fmt.Fprintf(w, "\n%s: replicas min %d, max %d; last scale check: %s\n", tier, r.Min, r.Max, dash(oneLine(r.LastScale)))
	if r.Error != "" {
		fmt.Fprintf(w, "  unknown: %s\n", oneLine(r.Error))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, j := range r.Jobs {
		kind := "kept"
		if j.Extra {
			kind = "extra"
		}
		inFlight := "-"
		if j.InFlight != nil {
			inFlight = fmt.Sprint(*j.InFlight)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\tin flight %s\n", j.JobID, kind, j.State, dash(j.Node), dash(j.Endpoint), inFlight)
	}
	tw.Flush()
}

func jobsText(r statusJSON) string {
	if r.SchedulerError != "" {
		return "unknown (scheduler did not answer)"
	}
	if len(r.Jobs) == 0 {
		return "none"
	}
	var parts []string
	for _, j := range r.Jobs {
		parts = append(parts, j.ID+" "+j.State)
	}
	return strings.Join(parts, ", ")
}

func nextText(r statusJSON) string {
	if r.Next == string(ActionNothing) || r.Next == string(ActionUnknown) {
		return r.Next
	}
	return r.Next + ": " + r.NextReason
}

func lastError(r statusJSON) string {
	if r.LastError == "" {
		return "-"
	}
	return r.LastErrorAt + " " + oneLine(r.LastError)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps an error on its table row.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:120]) + "…"
	}
	return s
}
