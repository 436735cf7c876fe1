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
// calls Started). One goroutine owns an Agent; the file I/O of a tick may
// run on another (Begin, TickJob.Run, Settle), so that a hung shared file
// system never holds its owner up.
type Agent struct {
	files  Files
	timing Timing
	now    func() time.Time
	// self is the member as last written successfully: its lease is the
	// one the others see.
	self Member
	// want is the member as it should be written next; want.Leads follows
	// role (a member says it leads until it resigns).
	want Member
	role Role
	// term is the term this member leads or has just taken (role not
	// RoleFollower).
	term Term
	// c is the last read of the directory that worked.
	c Contents
	// unreadable is the highest term number whose file could not be read,
	// and when this member first saw it so.
	unreadable struct {
		n     int
		since time.Time
	}
	last Decision
}

// NewAgent returns the agent of member m (its identity, address, port and
// state set; heartbeat and lease are set at each tick), on the clock now.
func NewAgent(files Files, m Member, t Timing, now func() time.Time) *Agent {
	m.Schema = SchemaVersion
	return &Agent{files: files, timing: t, now: now, want: m}
}

// Self is the member as last written successfully.
func (a *Agent) Self() Member { return a.self }

// Role is the member's role as last decided (or resigned).
func (a *Agent) Role() Role { return a.role }

// Last is the last decision.
func (a *Agent) Last() Decision { return a.last }

// Members are the valid member files of the last read that worked.
func (a *Agent) Members() []Member { return a.c.Members }

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

// Resign gives up leading: from the next write of the member file others
// may take over at once. It is the one way out of RoleLost, and the
// caller's word that its head is gone: the resignation lets another member
// start one at once.
func (a *Agent) Resign() {
	a.role, a.want.Leads, a.want.Using = RoleFollower, false, nil
}

// Tick renews the member file, reads the directory, decides and, when it
// is the one to, takes the next term, all on the caller's goroutine.
func (a *Agent) Tick() Decision {
	d := a.Settle(a.Begin().Run())
	if d.Take {
		d = a.Took(a.BeginTake(d).Run())
	}
	return d
}

// TickJob is the file I/O of one tick: the member file to write, then the
// directory to read. Begin builds it on the Agent's goroutine; Run may run
// anywhere; Settle takes its result back on the Agent's goroutine.
type TickJob struct {
	files Files
	m     Member
	lease time.Duration
	now   func() time.Time
}

// TickIO is what a tick's file I/O found. The clock is read after each
// operation, so that a decision never uses a time from before the I/O it
// depends on.
type TickIO struct {
	// Wrote is the member file as written (heartbeat and lease set when the
	// write began); WriteErr its error; WroteAt when it returned.
	Wrote    Member
	WriteErr error
	WroteAt  time.Time
	Contents Contents
	ReadErr  error
	// Now is the clock once the read returned.
	Now time.Time
}

// Begin builds the file I/O of the next tick.
func (a *Agent) Begin() TickJob {
	if a.want.Joined.IsZero() {
		a.want.Joined = a.now()
	}
	a.want.Leads = a.role != RoleFollower
	return TickJob{files: a.files, m: a.want, lease: a.timing.Lease, now: a.now}
}

// Run writes the member file with a fresh heartbeat and lease, then reads
// the directory.
func (j TickJob) Run() TickIO {
	m := j.m
	m.Heartbeat = j.now()
	m.LeaseExpires = m.Heartbeat.Add(j.lease)
	io := TickIO{Wrote: m}
	io.WriteErr = j.files.WriteMember(m)
	io.WroteAt = j.now()
	io.Contents, io.ReadErr = j.files.Read()
	io.Now = j.now()
	return io
}

// Settle takes a tick's file I/O and decides. A write that fails leaves
// the old lease in place (the others see it run out; the lead ends before
// it does); a write that returns past the end of the lead it was to renew
// ends it, whatever it wrote. A read that fails decides from the last read
// that worked and takes nothing.
func (a *Agent) Settle(io TickIO) Decision {
	late := false
	if io.WriteErr == nil {
		late = a.role == RoleLeader && !io.WroteAt.Before(a.timing.leadEnd(a.self, a.term))
		a.self = io.Wrote
	}
	if io.ReadErr == nil {
		a.c = io.Contents
	}
	d := a.decide(View{Late: late, Blind: io.ReadErr != nil, Now: io.Now})
	if io.ReadErr != nil {
		d.Why = "cannot read the members: " + io.ReadErr.Error() + "; " + d.Why
	} else {
		d.Ignored, d.Request = io.Contents.Ignored, io.Contents.Request
	}
	return d
}

// decide fills v with what the agent knows, decides and keeps the role.
func (a *Agent) decide(v View) Decision {
	if a.c.Top > a.c.Term.N && a.unreadable.n != a.c.Top {
		a.unreadable.n, a.unreadable.since = a.c.Top, v.Now
	}
	v.Self, v.Role, v.Term, v.Top, v.TopSince = a.self, a.role, a.c.Term, a.c.Top, a.unreadable.since
	v.Members = others(a.c.Members, a.self)
	d := Decide(v, a.timing)
	a.role, a.last = d.Role, d
	if a.role == RoleLeader {
		a.term = a.c.Term
	}
	return d
}

// TakeJob is the file I/O of taking a term: create its file, then write
// the member file that says this member leads it.
type TakeJob struct {
	files Files
	t     Term
	m     Member
	lease time.Duration
	now   func() time.Time
}

// TakeIO is what taking a term found: the term as created (or TakeErr),
// then the member file's write, as in TickIO.
type TakeIO struct {
	Term     Term
	TakeErr  error
	Wrote    Member
	WriteErr error
	WroteAt  time.Time
}

// BeginTake builds the file I/O of taking term d.Term+1.
func (a *Agent) BeginTake(d Decision) TakeJob {
	t := Term{Schema: SchemaVersion, N: d.Term + 1, JobID: a.want.JobID, RunID: a.want.RunID, Node: a.want.Node}
	m := a.want
	m.Leads, m.Term, m.Using = true, t.N, nil
	return TakeJob{files: a.files, t: t, m: m, lease: a.timing.Lease, now: a.now}
}

// Run creates the term's file; when it is this member's, it writes the
// member file that says it leads it.
func (j TakeJob) Run() TakeIO {
	io := TakeIO{Term: j.t}
	io.Term.Created = j.now()
	if io.TakeErr = j.files.TakeTerm(io.Term); io.TakeErr != nil {
		return io
	}
	m := j.m
	m.Heartbeat = j.now()
	m.LeaseExpires = m.Heartbeat.Add(j.lease)
	io.Wrote, io.WriteErr = m, j.files.WriteMember(m)
	io.WroteAt = j.now()
	return io
}

// Took takes the outcome of taking a term and decides again: the member
// that created the term's file leads it once its member file says so, in
// time; one whose member file could not be written yet waits for a write
// that works (Decide), the term still its own.
func (a *Agent) Took(io TakeIO) Decision {
	if io.TakeErr != nil {
		d := a.last
		d.Take = false
		if errors.Is(io.TakeErr, ErrTermTaken) {
			d.Why += ": another member took it first"
		} else {
			d.Why += ": " + io.TakeErr.Error()
		}
		a.last = d
		return d
	}
	a.want.Term, a.want.Using = io.Term.N, nil
	a.c.Term, a.c.Top, a.term = io.Term, max(a.c.Top, io.Term.N), io.Term
	late := false
	if io.WriteErr == nil {
		late = !io.WroteAt.Before(a.timing.leadEnd(Member{}, io.Term))
		a.self = io.Wrote
	}
	d := a.decide(View{Took: true, Late: late, Now: io.WroteAt})
	if io.WriteErr != nil {
		d.Why += ": took it, but cannot write the member file yet: " + io.WriteErr.Error()
	}
	return d
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
