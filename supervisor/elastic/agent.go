package elastic

import (
	"errors"
	"time"
)

// Files is what an Agent needs of the shared directory; *Store implements it.
type Files interface {
	Read() (Contents, error)
	WriteMember(Member) error
	TakeTerm(Term) error
}

// Agent is one member's side of the membership: at every tick it renews
// its member file, reads the others', decides (Decide) and, when it is the
// one to, takes the next term. It never starts a process: its caller runs
// the head while the decision says Lead, and a worker restarts its
// rpc-server when the term moves past the one it last started for (then
// calls Started). One goroutine owns an Agent.
type Agent struct {
	files  Files
	timing Timing
	// self is the member as last written successfully: its lease is the
	// one the others see.
	self Member
	// want is the member as it should be written next.
	want Member
	last Decision
	// lost is set once this member stopped leading its term without
	// resigning (its lease ran out, a newer term appeared): it never leads
	// that term again, and it says so only through Resign, called once its
	// head is gone.
	lost bool
}

// NewAgent returns the agent of member m (its identity, address, port and
// state set; heartbeat and lease are set at each tick).
func NewAgent(files Files, m Member, t Timing) *Agent {
	m.Schema = SchemaVersion
	return &Agent{files: files, timing: t, want: m}
}

// Self is the member as last written successfully.
func (a *Agent) Self() Member { return a.self }

// SetState changes the member's state (and LeaveBy, Reason) from the next
// tick on.
func (a *Agent) SetState(s State, leaveBy time.Time, reason string) {
	a.want.State, a.want.LeaveBy, a.want.Reason = s, leaveBy, reason
}

// Started records that this member's rpc-server now runs for term n (a
// worker restarts it when the term changes, so no older head holds it).
func (a *Agent) Started(n int) { a.want.Term = max(a.want.Term, n) }

// Using records the workers the leader's head runs with.
func (a *Agent) Using(jobIDs []string) { a.want.Using = jobIDs }

// Resign gives up leading: from the next tick others may take over at once.
// The caller must have stopped its head: the resignation lets another
// member start one at once.
func (a *Agent) Resign() { a.want.Leads, a.want.Using, a.lost = false, nil, false }

// Tick renews the member file at now and decides. A write that fails leaves
// the old lease in place (the others see it run out; Decide stops leading
// before it does); a read that fails decides from nothing but this
// member's own lease, so it never takes a term blind.
func (a *Agent) Tick(now time.Time) Decision {
	if a.want.Joined.IsZero() {
		a.want.Joined = now
	}
	m := a.want
	m.Heartbeat, m.LeaseExpires = now, now.Add(a.timing.Lease)
	if err := a.files.WriteMember(m); err == nil {
		a.self = m
	}
	c, err := a.files.Read()
	if err != nil {
		d := a.last
		d.Take = false
		d.Lead = d.Lead && !a.lost && holdsLead(a.self, now, a.timing)
		d.Why = "cannot read the members: " + err.Error()
		a.settle(d)
		return d
	}
	self := a.self
	self.Leads = self.Leads && !a.lost
	v := View{Self: self, Members: others(c.Members, a.self), Term: c.Term, Now: now}
	d := Decide(v, a.timing)
	d.Ignored = c.Ignored
	if d.Take {
		d = a.take(v, d)
	}
	d.Request = c.Request
	a.settle(d)
	return d
}

// take tries to create the next term; on success this member leads it.
func (a *Agent) take(v View, d Decision) Decision {
	t := Term{Schema: SchemaVersion, N: d.Term + 1, JobID: a.want.JobID, RunID: a.want.RunID,
		Node: a.want.Node, Created: v.Now}
	err := a.files.TakeTerm(t)
	if errors.Is(err, ErrTermTaken) {
		d.Take, d.Why = false, d.Why+": another member took it first"
		return d
	}
	if err != nil {
		d.Take, d.Why = false, d.Why+": "+err.Error()
		return d
	}
	m := a.want
	m.Leads, m.Term, m.Using = true, t.N, nil
	m.Heartbeat, m.LeaseExpires = v.Now, v.Now.Add(a.timing.Lease)
	a.want, a.lost = m, false
	if err := a.files.WriteMember(m); err != nil {
		// Leading with a lease nobody saw renewed would be unsafe: the
		// term is ours, but the lead waits for a write that works.
		d.Take, d.Why = false, d.Why+": took it, but cannot write the member file: "+err.Error()
		return d
	}
	a.self = m
	v.Self, v.Term = m, t
	return Decide(v, a.timing)
}

// settle keeps what follows from the decision: a member whose file says it
// leads, told it no longer does (lease ending, a newer term), has lost its
// term for good; its file keeps saying so until the caller, its head
// stopped, calls Resign.
func (a *Agent) settle(d Decision) {
	if !d.Lead && a.want.Leads {
		a.lost = true
	}
	a.last = d
}

// others is members without m itself.
func others(ms []Member, m Member) []Member {
	var out []Member
	for _, x := range ms {
		if x.JobID != m.JobID {
			out = append(out, x)
		}
	}
	return out
}
