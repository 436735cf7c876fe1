package elastic

import (
	"fmt"
	"slices"
	"time"

	"slurm-llm/endpoints/members"
)

// Timing are the durations leadership depends on.
type Timing struct {
	// Lease is how long a member's file vouches for it after a heartbeat.
	Lease time.Duration
	// Skew bounds the clock difference between nodes and the shared file
	// system's delay: a member takes over from a leader whose lease ended
	// only Skew after its end, and a leader stops its head Skew before its
	// own lease ends unless it renewed it.
	Skew time.Duration
}

// DefaultTiming is the timing of a real tier: a 10 s lease renewed every
// second, and a margin of 5 s for clock skew between nodes, the shared
// file system's delay, a member's tick and the kill of a head (at most
// tier.KillMargin). TestAtMostOneHead checks that it is enough for clocks
// within ±1 s and reads up to 1 s stale.
var DefaultTiming = Timing{Lease: 10 * time.Second, Skew: 5 * time.Second}

// View is what a member knows when it decides: itself as last written, the
// other members' files, and the highest term file.
type View struct {
	Self    Member
	Members []Member
	// Term is the highest term file; zero (N 0) before any.
	Term Term
	Now  time.Time
}

// Decision is what Decide says a member is now.
type Decision struct {
	// Term is the current term (0 before any leader).
	Term int
	// Lead: this member leads Term and may run a head.
	Lead bool
	// Leader is the current term's leader, when it is valid (live and
	// leading); nil otherwise.
	Leader *Member
	// Take: this member should try to create term Term+1 now.
	Take bool
	// Workers are, for the leader, the members its head may use: live, not
	// leaving, ready, their rpc-server started for this term; by job id.
	Workers []Member
	// Coming counts, for the leader, the other live members not leaving
	// that are not among Workers yet: their rpc-server is still starting
	// for this term (at the tier's start, after a handover).
	Coming int
	// Younger is set, for the leader, when a usable member younger than it
	// could lead: Slurm preempts the earliest-submitted job first, so the
	// leader should be the youngest (it hands over when idle).
	Younger bool
	// Why says what decided, for the log.
	Why string
	// Ignored are the files of the member directory the read did not take
	// (malformed, another owner's, another tier's), for the log.
	Ignored []Ignored
	// Request is the operator's request to the leader (request.json), if
	// any; the member runner's leader acts on it (Runner.asked).
	Request *members.Request
}

// Decide is the leadership rule, pure. A member leads its term while its
// own lease holds (minus Skew: it must stop its head before others may
// take over). A term's leader is followed while its file shows it live and
// leading. When it is not (it resigned, its lease ended, its job was
// requeued, its file is gone), the youngest usable member takes the next
// term: at once after a resignation, Skew after the lease's end, or — with
// no file to go by — Lease+Skew after the term began.
func Decide(v View, t Timing) Decision {
	d := Decision{Term: v.Term.N}
	self := v.Self
	if v.Term.N > 0 && v.Term.JobID == self.JobID && v.Term.RunID == self.RunID {
		if holdsLead(self, v.Now, t) {
			d.Lead, d.Why = true, fmt.Sprintf("leads term %d", v.Term.N)
			d.Workers = workers(v)
			d.Coming = coming(v, len(d.Workers))
			c, ok := candidate(v)
			d.Younger = ok && c.JobID != self.JobID && Younger(c.JobID, self.JobID)
			return d
		}
		d.Why = fmt.Sprintf("led term %d: lease ending or resigned", v.Term.N)
	}
	leader, found := termLeader(v)
	// A leader's file speaks only for the term it names: one written before
	// it took this term (a stale read of the shared directory) says nothing
	// about how it leads it, so it counts as no file.
	found = found && leader.Term == v.Term.N
	switch {
	case v.Term.N == 0:
		// The first term waits a lease after joining, so that members
		// started together see each other and the youngest leads.
		d.Why = "no leader yet"
		return d.maybeTake(v, self.Joined.Add(t.Lease))
	case found && leader.Leads && leader.Live(v.Now) && !(leader.JobID == self.JobID && leader.RunID == self.RunID):
		d.Leader = &leader
		d.Why = fmt.Sprintf("follows %s (term %d)", leader.JobID, v.Term.N)
		return d
	case found && !leader.Leads:
		d.Why = fmt.Sprintf("leader %s of term %d resigned", leader.JobID, v.Term.N)
		return d.maybeTake(v, v.Now)
	case found:
		d.Why = fmt.Sprintf("leader %s of term %d: lease ended %s", leader.JobID, v.Term.N, leader.LeaseExpires.UTC().Format(time.RFC3339))
		return d.maybeTake(v, leader.LeaseExpires.Add(t.Skew))
	default:
		d.Why = fmt.Sprintf("leader %s of term %d has no file for it", v.Term.JobID, v.Term.N)
		return d.maybeTake(v, v.Term.Created.Add(t.Lease+t.Skew))
	}
}

// holdsLead reports whether m, leading, may go on leading at now: its own
// lease (as last written) holds for Skew more. Past that, others may take
// over once the lease has ended plus Skew, so its head must be gone.
func holdsLead(m Member, now time.Time, t Timing) bool {
	return m.Leads && now.Before(m.LeaseExpires.Add(-t.Skew))
}

// maybeTake sets Take when this member is the youngest usable one and the
// takeover is allowed from `from`.
func (d Decision) maybeTake(v View, from time.Time) Decision {
	c, ok := candidate(v)
	switch {
	case !ok || c.JobID != v.Self.JobID || c.RunID != v.Self.RunID:
		return d
	case v.Now.Before(from):
		d.Why += fmt.Sprintf("; may take term %d at %s", v.Term.N+1, from.UTC().Format(time.RFC3339Nano))
		return d
	}
	d.Take = true
	d.Why += fmt.Sprintf("; takes term %d", v.Term.N+1)
	return d
}

// termLeader finds the member file of the term's leader (same job, same run).
func termLeader(v View) (Member, bool) {
	for _, m := range append([]Member{v.Self}, v.Members...) {
		if m.JobID == v.Term.JobID && m.RunID == v.Term.RunID {
			return m, true
		}
	}
	return Member{}, false
}

// candidate is the member that should lead next: the youngest usable one
// (Slurm preempts the earliest-submitted first, so the youngest stays
// longest).
func candidate(v View) (Member, bool) {
	var best Member
	found := false
	for _, m := range append([]Member{v.Self}, v.Members...) {
		if !m.Usable(v.Now) || m.CannotLead {
			continue
		}
		if !found || Younger(m.JobID, best.JobID) || (m.JobID == best.JobID && m.RunID > best.RunID) {
			best, found = m, true
		}
	}
	return best, found
}

// workers are the members the leader's head may use.
// coming counts the other usable members that do not lead, less the
// workers found among them.
func coming(v View, workers int) int {
	n := 0
	for _, m := range v.Members {
		if m.JobID != v.Self.JobID && m.Usable(v.Now) && !m.Leads {
			n++
		}
	}
	return max(n-workers, 0)
}

func workers(v View) []Member {
	var out []Member
	for _, m := range v.Members {
		if m.JobID == v.Self.JobID || !m.Usable(v.Now) || m.State != StateReady || m.Term != v.Term.N || m.Leads {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.JobID == b.JobID:
			return 0
		case Younger(b.JobID, a.JobID):
			return -1
		}
		return 1
	})
	return out
}
