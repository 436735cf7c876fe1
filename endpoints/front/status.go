package front

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"slurm-llm/endpoints/tiers"
)

// Status is what the front door routes now, for operators (GET /status on
// the metrics listener, never the client port): per tier its view, its
// heads and their requests in flight, and how many requests it holds.
type Status struct {
	Time  time.Time    `json:"time"`
	Tiers []TierStatus `json:"tiers"`
}

// TierStatus is one tier in Status.
type TierStatus struct {
	Tier  string         `json:"tier"`
	View  tiers.TierView `json:"view"`
	Heads []HeadStatus   `json:"heads"`
	// Draining are the files of heads that drain: their requests finish,
	// nothing new goes there.
	Draining []string `json:"draining,omitempty"`
	Held     int      `json:"held"`
	// Users are the tier's users now, most requests first: on a head
	// (serving) and waiting in the front door (the queue by user); ""
	// is anonymous. At most maxStatusUsers.
	Users []UserStatus `json:"users,omitempty"`
}

// UserStatus is one user of a tier now.
type UserStatus struct {
	User    string `json:"user"`
	Serving int    `json:"serving"`
	Waiting int    `json:"waiting"`
}

// maxStatusUsers bounds the users /status lists per tier.
const maxStatusUsers = 20

// HeadStatus is one routed head in Status.
type HeadStatus struct {
	Addr     string `json:"addr"`
	File     string `json:"file"`
	Job      string `json:"job"`
	Node     string `json:"node"`
	InFlight int64  `json:"in_flight"`
	// Slots is the head's slots (its /slots; 0 unknown, -1 none to
	// read); Others the requests it had at its last load poll beyond the
	// front door's own (load.go).
	Slots   int64    `json:"slots,omitempty"`
	Others  int64    `json:"others,omitempty"`
	Failing bool     `json:"failing"`
	Models  []string `json:"models"`
}

// Status reports the current table and queues.
func (s *Server) Status() Status {
	t := s.tab.Load()
	now := s.now()
	st := Status{Time: now}
	for _, tier := range slices.Sorted(maps.Keys(t.views)) {
		ts := TierStatus{Tier: tier, View: t.views[tier], Draining: t.draining[tier], Heads: []HeadStatus{}}
		for _, h := range t.heads[tier] {
			hs := HeadStatus{Addr: h.addr, File: h.file, Job: h.job, Node: h.node, InFlight: h.inFlight.Load(),
				Slots: h.slots.Load(), Others: h.others.Load(), Failing: h.failing(now), Models: h.modelNames(nil)}
			slices.Sort(hs.Models)
			hs.Models = slices.Compact(hs.Models)
			ts.Heads = append(ts.Heads, hs)
		}
		users := map[string]*UserStatus{}
		get := func(name string) *UserStatus {
			if users[name] == nil {
				users[name] = &UserStatus{User: name}
			}
			return users[name]
		}
		q := s.queueOf(tier)
		q.mu.Lock()
		ts.Held = len(q.waiters)
		for _, w := range q.waiters {
			get(w.user).Waiting++
		}
		q.mu.Unlock()
		if s.opts.Access != nil {
			for name, l := range s.opts.Access.Tracker.Loads(tier) {
				if l.Serving > 0 {
					get(name).Serving = l.Serving
				}
			}
		}
		ts.Users = topUsers(users)
		st.Tiers = append(st.Tiers, ts)
	}
	return st
}

// StatusJSON is Status as indented JSON.
func (s *Server) StatusJSON() []byte {
	b, _ := json.MarshalIndent(s.Status(), "", "  ")
	return append(b, '\n')
}

// topUsers orders users by their requests (serving and waiting), most
// first, then by name, and keeps maxStatusUsers.
func topUsers(users map[string]*UserStatus) []UserStatus {
	out := make([]UserStatus, 0, len(users))
	for _, u := range users {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b UserStatus) int {
		if d := (b.Serving + b.Waiting) - (a.Serving + a.Waiting); d != 0 {
			return d
		}
		return strings.Compare(a.User, b.User)
	})
	return out[:min(len(out), maxStatusUsers)]
}
