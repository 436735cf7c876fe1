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
	// only Skew after its end, and a leader's lead ends Skew (and Margin)
	// before its lease does.
	Skew time.Duration
	// Margin is the kill of the leader's head at the lead's end: its shim's
	// SIGKILL and the kernel's reaping (tier.LeadMargin).
	Margin time.Duration
}

// DefaultTiming is the timing of a real tier: a 10 s lease renewed every
// second, a margin of 5 s for clock skew between nodes, the shared file
// system's delay and a member's tick, and 1 s for the kill of a head.
// TestAtMostOneHead checks that it is enough for clocks within ±1 s and
// reads up to 1 s stale.
var DefaultTiming = Timing{Lease: 10 * time.Second, Skew: 5 * time.Second, Margin: time.Second}

// LeadEnd is when the lead of a member whose file is m ends: the end of
// m's lease, less Skew (others may take over Skew after the lease ends, by
// clocks up to Skew apart) and Margin (the kill of its head). It is the one
// place this is computed: Decide leads until then, and the head's shim has
// it as its deadline (tier.Process.LeaseUntil), on the leader's own node.
func (t Timing) LeadEnd(m Member) time.Time { return m.LeaseExpires.Add(-t.Skew - t.Margin) }

// leadEnd is when the lead of a leader of term ends: LeadEnd of its file
// self once that says it leads the term; before (it has just taken it and
// its member file is not written yet), LeadEnd of a lease from the term's
// creation, since others take over Lease+Skew after a term began whose
// leader's file never said it leads it.
func (t Timing) leadEnd(self Member, term Term) time.Time {
	if self.Leads && self.Term == term.N {
		return t.LeadEnd(self)
	}
	return t.LeadEnd(Member{LeaseExpires: term.Created.Add(t.Lease)})
}

// Role is what a member is to its tier's leadership. The zero value is
// RoleFollower.
type Role string

// The roles of a member. Decide moves a member from one to the next, but
// for Resign (the caller's word that its head is gone).
const (
	// RoleFollower: it does not lead; its file says so (leads false).
	RoleFollower Role = ""
	// RoleLeader: it created the current term's file; it leads while its
	// file says so (written in time) and until LeadEnd.
	RoleLeader Role = "leader"
	// RoleLost: it led a term and no longer does (its lead ended: its lease
	// was not renewed in time, a write ran past the lead's end, a newer
	// term began). Its head must be gone before it says so (Resign): until
	// then its file goes on saying it leads and it takes no term.
	RoleLost Role = "lost"
)

// String names the role, for the log.
func (r Role) String() string {
	if r == RoleFollower {
		return "follower"
	}
	return string(r)
}

// View is what a member knows when it decides: itself as last written, its
// role, the other members' files and the term files, all read before Now.
type View struct {
	// Self is the member's file as last written successfully: the lease
	// the others see.
	Self Member
	Role Role
	// Late: this tick's write of the member file succeeded, but returned
	// past the end of the lead it was to renew; the lead is over.
	Late bool
	// Took: this member has just created the file of Term.
	Took bool
	// Blind: the directory could not be read; Members and Term are from
	// the last read that worked.
	Blind   bool
	Members []Member
	// Term is the highest term file that could be read; zero (N 0) before
	// any. Top is the highest term number among the term files' names:
	// above Term.N when the highest term's file cannot be read, since
	// TopSince (as this member first saw it).
	Term     Term
	Top      int
	TopSince time.Time
	// Now is read after the file I/O the decision depends on.
	Now time.Time
}

// Decision is what Decide says a member is now.
type Decision struct {
	// Term is the current term, the highest number a term file has (0
	// before any leader).
	Term int
	// Role is the member's role from now on.
	Role Role
	// Lead: this member leads Term and may run a head until LeadEnd.
	Lead    bool
	LeadEnd time.Time
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

// Decide is the leadership rule, pure. A leader leads its term until
// LeadEnd of the file it last wrote in time; past that, or when a newer
// term exists, it is lost: its head must go before it resigns. A term's
// leader is followed while its file shows it live and leading. When it is
// not (it resigned, its lease ended, its job was requeued, its file is
// gone), the youngest usable member takes the next term: at once after a
// resignation, Skew after the lease's end, or — with no file to go by —
// Lease+Skew after the term began. A highest term whose file cannot be
// read has no leader anyone knows: it is waited out for Lease+Skew from
// when it was first seen, then passed. A member that cannot read the
// directory takes nothing.
func Decide(v View, t Timing) Decision {
	d := Decision{Term: max(v.Term.N, v.Top), Role: v.Role}
	if v.Took && d.Role == RoleFollower {
		d.Role = RoleLeader
	}
	if d.Role == RoleLeader {
		d = d.leads(v, t)
		if d.Role == RoleLeader {
			return d
		}
	}
	if d.Role == RoleLost {
		d.Why += "; its head must go before it resigns"
		return d
	}
	d = d.follows(v, t)
	if v.Blind && d.Take {
		d.Take, d.Why = false, d.Why+" (not while the directory cannot be read)"
	}
	return d
}

// leads decides for a leader: it leads until its lead ends, or waits for
// its member file to say it leads a term it has just taken; otherwise it
// is lost.
func (d Decision) leads(v View, t Timing) Decision {
	self, n := v.Self, v.Term.N
	pending, end := !self.Leads || self.Term != n, t.leadEnd(v.Self, v.Term)
	switch {
	case n == 0 || v.Term.JobID != self.JobID || v.Term.RunID != self.RunID || v.Top > n:
		d.Role, d.Why = RoleLost, fmt.Sprintf("led a term before term %d", d.Term)
	case v.Late:
		d.Role, d.Why = RoleLost, fmt.Sprintf("led term %d: its member file's write returned after its lead ended", n)
	case pending && !v.Now.Before(end):
		d.Role, d.Why = RoleLost, fmt.Sprintf("took term %d, but could not write its member file in time", n)
	case pending:
		d.Why = fmt.Sprintf("took term %d: waits for its member file to say so", n)
	case !v.Now.Before(end):
		d.Role, d.Why = RoleLost, fmt.Sprintf("led term %d: its lead ended %s, its lease not renewed in time", n, end.UTC().Format(time.RFC3339Nano))
	default:
		d.Lead, d.LeadEnd, d.Why = true, end, fmt.Sprintf("leads term %d", n)
		d.Workers = workers(v)
		d.Coming = coming(v, len(d.Workers))
		c, ok := candidate(v)
		d.Younger = ok && c.JobID != self.JobID && Younger(c.JobID, self.JobID)
	}
	return d
}

// follows decides for a member that does not lead: whom it follows, or
// whether it takes the next term.
func (d Decision) follows(v View, t Timing) Decision {
	self := v.Self
	if v.Top > v.Term.N {
		// The highest term's file cannot be read (a newer schema, a damaged
		// file, another owner's): its leader is unknown, unless a live
		// member's file says it leads that term.
		for _, m := range v.Members {
			if m.Leads && m.Term == v.Top && m.Live(v.Now) && m.JobID != self.JobID {
				d.Leader = &m
				d.Why = fmt.Sprintf("follows %s (term %d, whose file cannot be read)", m.JobID, v.Top)
				return d
			}
		}
		d.Why = fmt.Sprintf("term %d's file cannot be read: no leader known", v.Top)
		return d.maybeTake(v, v.TopSince.Add(t.Lease+t.Skew))
	}
	leader, found := termLeader(v)
	// A leader's file speaks only for the term it names: one written before
	// it took this term (a stale read of the shared directory) says nothing
	// about how it leads it, so it counts as no file.
	found = found && leader.Term == v.Term.N
	me := leader.JobID == self.JobID && leader.RunID == self.RunID
	switch {
	case v.Term.N == 0:
		// The first term waits a lease after joining, so that members
		// started together see each other and the youngest leads.
		d.Why = "no leader yet"
		return d.maybeTake(v, self.Joined.Add(t.Lease))
	case found && leader.Leads && leader.Live(v.Now) && !me:
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

// maybeTake sets Take when this member is the youngest usable one and the
// takeover is allowed from `from`.
func (d Decision) maybeTake(v View, from time.Time) Decision {
	c, ok := candidate(v)
	switch {
	case !ok || c.JobID != v.Self.JobID || c.RunID != v.Self.RunID:
		return d
	case v.Now.Before(from):
		d.Why += fmt.Sprintf("; may take term %d at %s", d.Term+1, from.UTC().Format(time.RFC3339Nano))
		return d
	}
	d.Take = true
	d.Why += fmt.Sprintf("; takes term %d", d.Term+1)
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
