package elastic

import (
	"encoding/json"
	"testing"
	"time"
)

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

var timing = Timing{Lease: 10 * time.Second, Skew: 3 * time.Second, Margin: time.Second}

func TestDecide(t *testing.T) {
	leader := member("101")
	leader.Leads, leader.Term = true, 4
	term := Term{Schema: SchemaVersion, N: 4, JobID: "101", RunID: leader.RunID, Created: t0.Add(-time.Minute)}
	worker := func(job string, mod func(*Member)) Member {
		m := member(job)
		m.Term = 4
		if mod != nil {
			mod(&m)
		}
		return m
	}
	tests := []struct {
		name     string
		v        View
		wantLead bool
		wantTake bool
		wantRole Role
		workers  int
		follows  bool
		// ownLease keeps Self's lease as given; else it is renewed at Now,
		// as the agent does at every tick.
		ownLease bool
	}{
		{name: "nobody leads yet: the youngest takes", v: View{Self: member("103"), Members: []Member{member("101"), member("102")}, Now: t0},
			wantTake: true},
		{name: "a member that cannot lead (no model on its node) never takes",
			v: View{Self: func() Member { m := member("103"); m.CannotLead = true; return m }(), Members: []Member{member("101")}, Now: t0}},
		{name: "nobody leads yet: an older member waits", v: View{Self: member("101"), Members: []Member{member("103")}, Now: t0}},
		{name: "the leader leads, with the workers started for its term",
			v: View{Self: leader, Role: RoleLeader, Term: term, Top: 4, Now: t0,
				Members: []Member{worker("102", nil), worker("103", func(m *Member) { m.Term = 3 })}},
			wantLead: true, workers: 1, wantRole: RoleLeader},
		{name: "the leader leads until skew and the margin before its lease ends",
			v: View{Self: leader, Role: RoleLeader, Term: term, Top: 4, Now: t0.Add(6*time.Second - time.Nanosecond)}, ownLease: true,
			wantLead: true, wantRole: RoleLeader},
		{name: "then it is lost: its head must go", v: View{Self: leader, Role: RoleLeader, Term: term, Top: 4, Now: t0.Add(6 * time.Second)},
			ownLease: true, wantRole: RoleLost},
		{name: "a write that returned after the lead ended ends it", v: View{Self: leader, Role: RoleLeader, Term: term, Top: 4, Late: true, Now: t0},
			wantRole: RoleLost},
		{name: "a newer term ends the lead", v: View{Self: leader, Role: RoleLeader, Term: term, Top: 5, Now: t0}, wantRole: RoleLost},
		// A lost leader is the youngest and its own file shows no live
		// lead: still it takes nothing until it has resigned, its head gone.
		{name: "a lost leader takes nothing before it resigns",
			v:        View{Self: func() Member { m := leader; m.Leads = false; m.JobID = "109"; return m }(), Role: RoleLost, Term: term, Top: 4, Now: t0.Add(time.Hour)},
			wantRole: RoleLost},
		{name: "a member that has just taken a term leads it, once its file says so",
			v:        View{Self: worker("105", nil), Took: true, Term: Term{Schema: SchemaVersion, N: 5, JobID: "105", RunID: worker("105", nil).RunID, Created: t0}, Top: 5, Now: t0},
			wantRole: RoleLeader},
		{name: "one whose file is not written in time loses the term",
			v: View{Self: worker("105", nil), Role: RoleLeader, Term: Term{Schema: SchemaVersion, N: 5, JobID: "105", RunID: worker("105", nil).RunID, Created: t0},
				Top: 5, Now: t0.Add(6 * time.Second)},
			wantRole: RoleLost},
		{name: "a worker follows a live leader", v: View{Self: worker("102", nil), Term: term, Members: []Member{leader}, Now: t0},
			follows: true},
		{name: "the leader resigned: the youngest takes at once",
			v:        View{Self: worker("103", nil), Term: term, Members: []Member{func() Member { m := leader; m.Leads = false; return m }()}, Now: t0},
			wantTake: true},
		{name: "the leader's lease ended: wait out the skew", v: View{Self: worker("103", nil), Term: term, Members: []Member{leader}, Now: t0.Add(11 * time.Second)}},
		{name: "the leader's lease ended and the skew passed: take",
			v:        View{Self: worker("103", nil), Term: term, Members: []Member{leader}, Now: t0.Add(13 * time.Second)},
			wantTake: true},
		{name: "no file of the leader: wait lease and skew from the term's start",
			v: View{Self: worker("103", nil), Term: Term{Schema: SchemaVersion, N: 4, JobID: "101", RunID: leader.RunID, Created: t0}, Now: t0.Add(12 * time.Second)}},
		// Regression (found by TestAtMostOneHead): a stale read of the new
		// leader's file, written before it took the term, looked like a
		// resignation, and a second member took the next term at once.
		{name: "a leader's file from before its term is no resignation",
			v: View{Self: worker("103", nil), Term: Term{Schema: SchemaVersion, N: 4, JobID: "101", RunID: leader.RunID, Created: t0},
				Members: []Member{func() Member { m := leader; m.Leads, m.Term = false, 3; return m }()}, Now: t0.Add(time.Second)}},
		{name: "a leaving member never takes",
			v: View{Self: worker("103", func(m *Member) { m.State = StateLeaving }), Term: term, Now: t0.Add(time.Hour)}},
		{name: "an unreadable highest term: no leader known, waited out",
			v: View{Self: worker("103", nil), Term: term, Top: 5, TopSince: t0, Members: []Member{leader}, Now: t0.Add(12 * time.Second)}},
		{name: "an unreadable highest term: passed after lease and skew",
			v:        View{Self: worker("103", nil), Term: term, Top: 5, TopSince: t0, Members: []Member{leader}, Now: t0.Add(13 * time.Second)},
			wantTake: true},
		{name: "an unreadable highest term whose leader's file says it leads it is followed",
			v: View{Self: worker("103", nil), Term: term, Top: 5, TopSince: t0, Now: t0.Add(time.Hour),
				Members: []Member{func() Member {
					m := worker("104", nil)
					m.Leads, m.Term = true, 5
					m.Heartbeat, m.LeaseExpires = t0.Add(time.Hour), t0.Add(time.Hour+10*time.Second)
					return m
				}()}},
			follows: true},
		{name: "nothing is taken while the directory cannot be read",
			v: View{Self: worker("103", nil), Term: term, Top: 4, Blind: true, Members: []Member{leader}, Now: t0.Add(13 * time.Second)}},
		{name: "a requeued leader (new run) is no leader",
			v:        View{Self: worker("103", nil), Term: term, Members: []Member{func() Member { m := leader; m.RunID = "ffffffffffffffff"; return m }()}, Now: t0.Add(time.Minute)},
			wantTake: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.ownLease {
				tt.v.Self.Heartbeat, tt.v.Self.LeaseExpires = tt.v.Now, tt.v.Now.Add(timing.Lease)
			}
			if tt.v.Top < tt.v.Term.N {
				tt.v.Top = tt.v.Term.N
			}
			d := Decide(tt.v, timing)
			if d.Lead != tt.wantLead || d.Take != tt.wantTake || len(d.Workers) != tt.workers || (d.Leader != nil) != tt.follows || d.Role != tt.wantRole {
				t.Errorf("Decide = lead %v take %v workers %d follows %v role %q (%s); want lead %v take %v workers %d follows %v role %q",
					d.Lead, d.Take, len(d.Workers), d.Leader != nil, d.Role, d.Why, tt.wantLead, tt.wantTake, tt.workers, tt.follows, tt.wantRole)
			}
			if d.Lead && !d.LeadEnd.Equal(tt.v.Self.LeaseExpires.Add(-timing.Skew-timing.Margin)) {
				t.Errorf("lead end %s, want the lease's end less skew and margin", d.LeadEnd)
			}
			if d.Take && tt.v.Top > tt.v.Term.N && d.Term != tt.v.Top {
				t.Errorf("takes term %d, want %d: the highest number a file has, plus one", d.Term+1, tt.v.Top+1)
			}
		})
	}
}
