package endpoints

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"
)

// JobChecker asks the scheduler about jobs. JobStates returns the state
// ("RUNNING", "PENDING", …) of each id it knows; ids absent from the map are
// gone. An error means the answer is unknown, not that the jobs are gone.
// slurm.Client implements it with one squeue call.
type JobChecker interface {
	JobStates(ctx context.Context, ids []string) (map[string]string, error)
}

// JobRunning is the only scheduler state whose endpoints are routed.
const JobRunning = "RUNNING"

// JobStates is the outcome of one scheduler check for a pass. The zero value
// means the scheduler was not asked (no checker configured, or no candidate):
// nothing is dropped for the scheduler's sake and nothing is unverified.
type JobStates struct {
	// Asked reports whether the scheduler was asked.
	Asked bool
	// States maps job id to scheduler state; absent ids are gone.
	States map[string]string
	// Err is the scheduler's error; when set, States is unknown.
	Err error
}

// Decision says whether one entry is routed and why.
type Decision struct {
	Entry
	// Live reports whether the entry is routed.
	Live bool `json:"live"`
	// Why says, for people, why it is (not) routed: "ready", "lease expired", …
	Why string `json:"why"`
	// Unverified is set on a live entry the scheduler could not confirm
	// (the check failed); it stays routed rather than being dropped on a
	// scheduler hiccup.
	Unverified bool `json:"unverified,omitempty"`
}

// Why values of Decide. A not-running job is reported as "job <STATE>".
const (
	WhyReady      = "ready"
	WhyExpired    = "lease expired"
	WhyStarting   = "starting"
	WhyDraining   = "draining"
	WhyGone       = "job gone"
	WhySuperseded = "superseded by a later restart"
	WhyOldTerm    = "superseded by a newer leader"
	WhyFuture     = "heartbeat in the future"
)

// DefaultClockSkew is how far in the future an endpoint file's heartbeat
// may be (clocks of the nodes and the controller differ a little) before
// the file is not trusted: a heartbeat in 2099 would keep its lease for
// ever.
const DefaultClockSkew = 30 * time.Second

// DecideOptions are what a caller knows beyond the files: how much clock
// skew to allow, and which entries passed every check it makes (owner,
// job, tier), and so may fence others.
type DecideOptions struct {
	// Skew is the clock skew allowed to a heartbeat; zero means
	// DefaultClockSkew.
	Skew time.Duration
	// Trusted reports whether an entry passed every check; only those
	// count for the restart and term fences (a forged file with a huge
	// term or restart count must not supersede the real ones). Nil means
	// all do. An entry with a heartbeat beyond the skew never does.
	Trusted func(Entry) bool
}

// FenceKey names a tier's job for fencing by restart count.
func FenceKey(tier, jobID string) string { return tier + "/" + jobID }

// Candidates returns the sorted, distinct job ids worth asking the
// scheduler about: those of ready entries whose lease holds at now.
func Candidates(entries []Entry, now time.Time) []string {
	var ids []string
	for _, en := range entries {
		if en.Endpoint.State == StateReady && !now.After(en.Endpoint.LeaseExpires) {
			ids = append(ids, en.Endpoint.JobID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// AskScheduler makes the pass's one scheduler call for ids. A nil checker
// or no ids means "not asked".
func AskScheduler(ctx context.Context, c JobChecker, ids []string) JobStates {
	if c == nil || len(ids) == 0 {
		return JobStates{}
	}
	states, err := c.JobStates(ctx, ids)
	if err != nil {
		return JobStates{Asked: true, Err: fmt.Errorf("ask scheduler about %d jobs: %w", len(ids), err)}
	}
	return JobStates{Asked: true, States: states}
}

// Decide is the pure liveness decision for one pass. An entry is live when
// it is the latest run of its tier and job (highest restart count, and not
// below fences, the highest counts seen in earlier passes; nil means none),
// its lease holds at now, its state is ready, and the scheduler says its job
// is RUNNING. A scheduler error drops nothing: such entries stay live and
// are marked unverified. Decisions keep the order of entries.
func Decide(entries []Entry, jobs JobStates, fences map[string]int, now time.Time) []Decision {
	return DecideWith(entries, jobs, fences, now, DecideOptions{})
}

// DecideWith is Decide with what the caller knows beyond the files: only
// the entries Fenceable keeps count for the fences, and a heartbeat further
// in the future than the skew is not live (WhyFuture).
func DecideWith(entries []Entry, jobs JobStates, fences map[string]int, now time.Time, opts DecideOptions) []Decision {
	fenceable := Fenceable(entries, now, opts)
	latest := LatestRestarts(fenceable, fences)
	terms := highestTerms(fenceable, now)
	skew := opts.skew()
	out := make([]Decision, 0, len(entries))
	for _, en := range entries {
		d := Decision{Entry: en}
		d.Why = decide(en.Endpoint, jobs, latest, now)
		if en.Endpoint.Heartbeat.After(now.Add(skew)) {
			d.Why = WhyFuture
		}
		if d.Why == WhyReady && en.Endpoint.Term < terms[en.Endpoint.Tier] {
			d.Why = WhyOldTerm
		}
		d.Live = d.Why == WhyReady
		d.Unverified = d.Live && jobs.Asked && jobs.Err != nil
		out = append(out, d)
	}
	return out
}

// decide returns the Why of one endpoint; WhyReady means live.
func decide(e Endpoint, jobs JobStates, latest map[string]int, now time.Time) string {
	switch {
	case e.RestartCount < latest[FenceKey(e.Tier, e.JobID)]:
		return WhySuperseded
	case now.After(e.LeaseExpires):
		return WhyExpired
	case e.State == StateStarting:
		return WhyStarting
	case e.State == StateDraining:
		return WhyDraining
	case e.State != StateReady:
		return "state " + string(e.State)
	case !jobs.Asked || jobs.Err != nil:
		return WhyReady
	}
	state, ok := jobs.States[e.JobID]
	switch {
	case !ok:
		return WhyGone
	case state != JobRunning:
		return "job " + state
	}
	return WhyReady
}

func (o DecideOptions) skew() time.Duration {
	if o.Skew <= 0 {
		return DefaultClockSkew
	}
	return o.Skew
}

// Fenceable returns the entries that may fence others: trusted (see
// DecideOptions) and with a heartbeat within the skew.
func Fenceable(entries []Entry, now time.Time, opts DecideOptions) []Entry {
	out := make([]Entry, 0, len(entries))
	for _, en := range entries {
		if en.Endpoint.Heartbeat.After(now.Add(opts.skew())) || (opts.Trusted != nil && !opts.Trusted(en)) {
			continue
		}
		out = append(out, en)
	}
	return out
}

// highestTerms returns each tier's highest leadership term among the
// entries whose lease holds at now (elastic tiers; 0 for the others): a new
// leader's file, even while starting, supersedes the old leader's; a
// leftover whose lease ran out supersedes nothing.
func highestTerms(entries []Entry, now time.Time) map[string]int {
	out := map[string]int{}
	for _, en := range entries {
		if t := en.Endpoint.Term; t > out[en.Endpoint.Tier] && !now.After(en.Endpoint.LeaseExpires) {
			out[en.Endpoint.Tier] = t
		}
	}
	return out
}

// LatestRestarts returns, for each tier and job (FenceKey), the highest
// restart count among entries and fences. fences is not modified; a caller
// that keeps fences across passes stores the result.
func LatestRestarts(entries []Entry, fences map[string]int) map[string]int {
	latest := make(map[string]int, len(fences)+len(entries))
	for k, v := range fences {
		latest[k] = v
	}
	for _, en := range entries {
		k := FenceKey(en.Endpoint.Tier, en.Endpoint.JobID)
		if c, ok := latest[k]; !ok || en.Endpoint.RestartCount > c {
			latest[k] = en.Endpoint.RestartCount
		}
	}
	return latest
}

// Server is one live server a tier routes to (nginx's upstream, the
// front door's table) and the entry it came from.
type Server struct {
	// Addr is "host:port" ("[v6]:port"), from validated fields only.
	Addr string
	// File and Restart name the source entry in the header. Nothing else
	// from an endpoint file reaches nginx config: File is <tier>-<job>.json
	// after validation, Restart an int.
	File    string
	Restart int
}

// ServerOf returns the Server of a live decision, using addr as the host
// (the entry's own host, or an address it resolved to).
func ServerOf(d Decision, addr string) Server {
	e := d.Endpoint
	return Server{
		Addr: net.JoinHostPort(addr, strconv.Itoa(e.Port)),
		File: d.File, Restart: e.RestartCount,
	}
}
