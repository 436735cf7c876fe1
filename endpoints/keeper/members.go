package keeper

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/members"
)

// MembersView is what an operator sees of an elastic tier's members
// (`llm-upstreams status`): each member file, the current term and its
// leader, and what the leader's head serves with.
type MembersView struct {
	Tier string
	// Term is the highest term number among the term files' names, as the
	// members choose the next one; Leader the job leading it ("" when
	// none). TermUnread: that term's file could not be read (it is among
	// Ignored), and its leader is known only from a member file that says
	// it leads that term, as the members themselves judge.
	Term       int
	TermUnread bool
	Leader     string
	// Serving is the leader's endpoint's account of its plan ("3 of 3
	// nodes, context 131072"); "" when it has published none.
	Serving string
	Members []members.Member
	Ignored []members.Ignored
	// Err is why the members could not be read.
	Err string
}

// ErrNoEndpointDir: the keeper config names no endpoint_dir, so the
// members' files cannot be found.
var ErrNoEndpointDir = errors.New("keeper.toml sets no endpoint_dir: the members' files cannot be found")

// Members reads every elastic tier's members (the keeper account's files
// only).
func (k *Keeper) Members() []MembersView {
	var out []MembersView
	for _, name := range k.cfg.TierNames() {
		if !k.cfg.Tiers[name].elastic() {
			continue
		}
		v := MembersView{Tier: name}
		if k.cfg.EndpointDir == "" {
			v.Err = ErrNoEndpointDir.Error()
			out = append(out, v)
			continue
		}
		c, err := members.NewStore(k.cfg.EndpointDir, name, []uint32{k.owner}).Read()
		if err != nil {
			v.Err = err.Error()
			out = append(out, v)
			continue
		}
		v.Term, v.TermUnread, v.Members, v.Ignored = max(c.Term.N, c.Top), c.Top > c.Term.N, c.Members, c.Ignored
		if m, ok := leader(c.Members, v.Term, k.now()); ok {
			v.Leader = m.JobID
			path := filepath.Join(k.cfg.EndpointDir, endpoints.FileName(name, m.JobID))
			if e, err := endpoints.ReadFile(path, endpoints.ReadOptions{AllowedUIDs: []uint32{k.owner}}); err == nil {
				v.Serving = e.Serving
			}
		}
		out = append(out, v)
	}
	return out
}

// leader is the member that leads term with a live lease.
func leader(ms []members.Member, term int, now time.Time) (members.Member, bool) {
	for _, m := range ms {
		if m.Leads && m.Term == term && m.Live(now) {
			return m, true
		}
	}
	return members.Member{}, false
}

// WriteMembers prints the views as tables, one per elastic tier.
func WriteMembers(w io.Writer, views []MembersView, now time.Time) error {
	for _, v := range views {
		fmt.Fprintf(w, "\nMEMBERS %s", v.Tier)
		if v.Err != "" {
			fmt.Fprintf(w, ": cannot read them: %s\n", v.Err)
			continue
		}
		leader := "none"
		if v.Leader != "" {
			leader = "job " + v.Leader
		}
		fmt.Fprintf(w, " (term %d", v.Term)
		if v.TermUnread {
			fmt.Fprint(w, ", its file unreadable")
		}
		fmt.Fprintf(w, ", leader %s", leader)
		if v.Serving != "" {
			fmt.Fprintf(w, ", serving on %s", v.Serving)
		}
		fmt.Fprintln(w, ")")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tNODE\tROLE\tSTATE\tTERM\tLEASE LEFT\tUSING")
		for _, m := range v.Members {
			role := "worker"
			switch {
			case m.Leads && m.JobID == v.Leader:
				role = "leader"
			case m.Leads:
				role = "old leader"
			case m.CannotLead:
				role = "worker (cannot lead)"
			}
			left := "expired"
			if m.Live(now) {
				left = m.LeaseExpires.Sub(now).Round(100 * time.Millisecond).String()
			}
			using := "-"
			if len(m.Using) > 0 {
				using = strings.Join(m.Using, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.JobID, m.Node, role, m.State, m.Term, left, using)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, i := range v.Ignored {
			fmt.Fprintf(w, "  ignored %s: %s\n", i.File, i.Reason)
		}
	}
	return nil
}

// AskLeader writes an operator's request for an elastic tier's leader
// (members.Request: grow now, or hand the lead over now; the leader drains
// first). It must run as the tier account, as the keeper does.
func (k *Keeper) AskLeader(tier, action string) error {
	tc, ok := k.cfg.Tiers[tier]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", ErrUnknownTier, tier)
	case !tc.elastic():
		return fmt.Errorf("tier %s is not elastic: only an elastic tier's leader grows or hands over", tier)
	case k.cfg.EndpointDir == "":
		return ErrNoEndpointDir
	}
	return members.NewStore(k.cfg.EndpointDir, tier, []uint32{k.owner}).
		WriteRequest(members.Request{Schema: members.SchemaVersion, Action: action, At: k.now()})
}
