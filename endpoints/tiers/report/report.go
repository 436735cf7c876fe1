package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints/tiers"
)

// The availability report (`llm-upstreams report`) reads the record and
// says, per tier, over a window: the share of the observed time it was
// routed (and served at all, by its backup too), how many outages and how
// many of them a preemption began, how long it took to come back after
// each preemption (median, p90, max), its longest outage and why, and the
// time down per cause. Observed time runs from a "start" mark to the next
// "stop"; between a stop and the next start nothing is known and nothing
// is counted. A watch that crashed wrote no stop: its last state is taken
// to have lasted until the next start. An outage's cause is the first
// reason given during it that is not a passing one (stopping, starting,
// unknown), else its first reason, as transition decides.

// Outage is one span of a tier not routed to its own endpoints.
type Outage struct {
	Start    time.Time     `json:"start"`
	End      *time.Time    `json:"end"` // nil: still under way at the report's end
	Duration time.Duration `json:"duration_ns"`
	Cause    string        `json:"cause"`
}

// DurationStats summarises durations; zero Count means none.
type DurationStats struct {
	Count  int           `json:"count"`
	Median time.Duration `json:"median_ns"`
	P90    time.Duration `json:"p90_ns"`
	Max    time.Duration `json:"max_ns"`
}

// CauseTime is the time a tier was down (or on its backup) for one cause.
type CauseTime struct {
	Cause   string        `json:"cause"`
	Outages int           `json:"outages"`
	Time    time.Duration `json:"time_ns"`
}

// TierAvailability is one tier's part of the report.
type TierAvailability struct {
	Tier string `json:"tier"`
	// Observed is the time watch was running and knew the tier's state;
	// Routed, Backup and Down split it.
	Observed time.Duration `json:"observed_ns"`
	Routed   time.Duration `json:"routed_ns"`
	Backup   time.Duration `json:"backup_ns"`
	Down     time.Duration `json:"down_ns"`
	// RoutedPct is Routed/Observed, ServedPct (Routed+Backup)/Observed, in
	// percent; -1 when nothing was observed.
	RoutedPct float64 `json:"routed_pct"`
	ServedPct float64 `json:"served_pct"`
	// Outages counts the outages that overlap the window; Preemptions
	// those a preemption began.
	Outages     int `json:"outages"`
	Preemptions int `json:"preemptions"`
	// Recovery is the time from a preemption to routed again, over the
	// preemptions that ended in the window.
	Recovery DurationStats `json:"recovery"`
	// Longest is the longest outage overlapping the window.
	Longest *Outage `json:"longest"`
	// Why splits the time not routed (in the window) by cause.
	Why []CauseTime `json:"why"`
}

// AvailabilityReport is the report over [Since, Until].
type AvailabilityReport struct {
	Since time.Time          `json:"since"`
	Until time.Time          `json:"until"`
	Tiers []TierAvailability `json:"tiers"`
	// BadLines counts record lines that did not parse (skipped).
	BadLines int `json:"bad_lines"`
}

// tierTrack is the report's running state of one tier.
type tierTrack struct {
	state, reason string
	at            time.Time // when state began
	outage        *Outage   // the outage under way
	acc           TierAvailability
	outages       []Outage
}

// Availability computes the report of events over [since, until] for
// the tiers named (and any other tier the events name). It is pure.
func Availability(events []tiers.RecordEvent, names []string, since, until time.Time) AvailabilityReport {
	evs := slices.Clone(events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	track := map[string]*tierTrack{}
	for _, t := range names {
		track[t] = &tierTrack{acc: TierAvailability{Tier: t}}
	}
	observed := false
	last := time.Time{}
	advance := func(to time.Time) {
		if !last.IsZero() && observed {
			for _, tt := range track {
				tt.account(last, to, since, until)
			}
		}
		last = to
	}
	for _, ev := range evs {
		if ev.Time.After(until) {
			break
		}
		advance(ev.Time)
		switch ev.Event {
		case tiers.EventStart:
			observed = true
		case tiers.EventStop:
			observed = false
		case tiers.EventState:
			tt := track[ev.Tier]
			if tt == nil {
				tt = &tierTrack{acc: TierAvailability{Tier: ev.Tier}}
				track[ev.Tier] = tt
			}
			tt.change(ev)
		}
	}
	advance(until)
	rep := AvailabilityReport{Since: since, Until: until}
	for _, name := range slices.Sorted(maps.Keys(track)) {
		rep.Tiers = append(rep.Tiers, track[name].finish(since, until))
	}
	return rep
}

// account adds [from, to) clipped to the window to the tier's state.
func (tt *tierTrack) account(from, to, since, until time.Time) {
	if tt.state == "" {
		return
	}
	from, to = maxTime(from, since), minTime(to, until)
	if !to.After(from) {
		return
	}
	d := to.Sub(from)
	tt.acc.Observed += d
	switch tt.state {
	case tiers.StateRouted:
		tt.acc.Routed += d
	case tiers.StateBackup:
		tt.acc.Backup += d
	default:
		tt.acc.Down += d
	}
}

// change applies a state event: an outage begins or ends.
func (tt *tierTrack) change(ev tiers.RecordEvent) {
	switch {
	case ev.State == tiers.StateRouted && tt.outage != nil:
		end := ev.Time
		tt.outage.End, tt.outage.Duration = &end, end.Sub(tt.outage.Start)
		tt.outages = append(tt.outages, *tt.outage)
		tt.outage = nil
	case ev.State != tiers.StateRouted && tt.outage == nil:
		tt.outage = &Outage{Start: ev.Time, Cause: ev.Reason}
	case ev.State != tiers.StateRouted && tiers.Passing(tt.outage.Cause) && !tiers.Passing(ev.Reason):
		tt.outage.Cause = ev.Reason
	}
	tt.state, tt.reason, tt.at = ev.State, ev.Reason, ev.Time
}

// finish closes the running outage at until and fills the figures.
func (tt *tierTrack) finish(since, until time.Time) TierAvailability {
	outs := tt.outages
	if tt.outage != nil {
		o := *tt.outage
		o.Duration = until.Sub(o.Start)
		outs = append(outs, o)
	}
	a := tt.acc
	a.RoutedPct, a.ServedPct = -1, -1
	if a.Observed > 0 {
		a.RoutedPct = pct(a.Routed, a.Observed)
		a.ServedPct = pct(a.Routed+a.Backup, a.Observed)
	}
	why := map[string]*CauseTime{}
	var recoveries []time.Duration
	for i := range outs {
		o := outs[i]
		end := until
		if o.End != nil {
			end = *o.End
		}
		if end.Before(since) || !o.Start.Before(until) {
			continue
		}
		a.Outages++
		if o.Cause == tiers.ReasonPreempted {
			a.Preemptions++
			if o.End != nil {
				recoveries = append(recoveries, o.Duration)
			}
		}
		if a.Longest == nil || o.Duration > a.Longest.Duration {
			a.Longest = &o
		}
		c := why[o.Cause]
		if c == nil {
			c = &CauseTime{Cause: o.Cause}
			why[o.Cause] = c
		}
		c.Outages++
		c.Time += minTime(end, until).Sub(maxTime(o.Start, since))
	}
	a.Recovery = stats(recoveries)
	for _, c := range why {
		a.Why = append(a.Why, *c)
	}
	sort.Slice(a.Why, func(i, j int) bool { return a.Why[i].Time > a.Why[j].Time })
	return a
}

func pct(part, whole time.Duration) float64 {
	return math.Round(float64(part)/float64(whole)*10000) / 100
}

// stats is count, median, p90 (nearest rank) and max of ds.
func stats(ds []time.Duration) DurationStats {
	if len(ds) == 0 {
		return DurationStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[int(math.Ceil(p*float64(len(s))))-1] }
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return DurationStats{Count: len(s), Median: med, P90: rank(0.9), Max: s[len(s)-1]}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// WriteAvailability prints the report as tables, or as JSON.
func WriteAvailability(w io.Writer, rep AvailabilityReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(w, "availability from %s to %s\n", rep.Since.UTC().Format(time.RFC3339), rep.Until.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nTIER\tROUTED\tSERVED\tOBSERVED\tOUTAGES\tPREEMPTIONS\tRECOVERY MEDIAN/P90/MAX\tLONGEST OUTAGE")
	for _, a := range rep.Tiers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", a.Tier, pctText(a.RoutedPct), pctText(a.ServedPct),
			short(a.Observed), a.Outages, a.Preemptions, recoveryText(a.Recovery), longestText(a.Longest))
	}
	fmt.Fprintln(tw, "\nTIER\tNOT ROUTED BECAUSE\tOUTAGES\tTIME")
	for _, a := range rep.Tiers {
		for _, c := range a.Why {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Tier, c.Cause, c.Outages, short(c.Time))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.BadLines > 0 {
		fmt.Fprintf(w, "\n%d record lines did not parse and were skipped\n", rep.BadLines)
	}
	return nil
}

func pctText(p float64) string {
	if p < 0 {
		return "no data"
	}
	return strconv.FormatFloat(p, 'f', 2, 64) + "%"
}

func recoveryText(s DurationStats) string {
	if s.Count == 0 {
		return "-"
	}
	return short(s.Median) + " / " + short(s.P90) + " / " + short(s.Max)
}

func longestText(o *Outage) string {
	if o == nil {
		return "-"
	}
	s := short(o.Duration) + " from " + o.Start.UTC().Format(time.RFC3339)
	if o.End == nil {
		s += " (still down)"
	}
	return s + ": " + o.Cause
}

// short prints a duration to the second (milliseconds under 10 s).
func short(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ParseSince reads --since: a duration with "d" for days ("7d", "36h",
// "90m") counted back from now, or an RFC 3339 time.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("--since %q: want a number of days, a duration or an RFC 3339 time", s)
		}
		return now.Add(-time.Duration(n * 24 * float64(time.Hour))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want 7d, 36h, 90m or an RFC 3339 time", s)
	}
	return now.Add(-d), nil
}
