package keeper

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/members"
)

// TestMembersViewAndAskLeader: `llm-upstreams status` shows an elastic
// tier's members (node, role, state, term, lease left, the workers the
// leader uses) with what the leader serves on, and `tier grow|handover`
// writes the request its leader acts on; a tier that is not elastic is
// refused.
func TestMembersViewAndAskLeader(t *testing.T) {
	dir := t.TempDir()
	el := testTier()
	el.Name, el.JobName, el.Members = "reasoning", "llm-reasoning", 3
	cfg := testConfig(t, testTier(), el)
	cfg.EndpointDir = dir
	me := uint32(os.Getuid())
	k := New(cfg, Options{Now: func() time.Time { return t0 }, Owner: &me})
	store := members.NewStore(dir, "reasoning", nil)
	m := func(job, node string, leads bool, using ...string) members.Member {
		return members.Member{Schema: members.SchemaVersion, Tier: "reasoning", JobID: job, RunID: "00000000000000" + job[2:],
			Node: node, Addr: "10.78.0.1", RPCPort: 50052, State: members.StateReady, Term: 2, Leads: leads, Using: using,
			Heartbeat: t0, LeaseExpires: t0.Add(10 * time.Second)}
	}
	for _, x := range []members.Member{m("1001", "node1", false), m("1002", "node2", false), m("1003", "node3", true, "1001", "1002")} {
		if err := store.WriteMember(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.TakeTerm(members.Term{Schema: members.SchemaVersion, N: 2, JobID: "1003", RunID: "0000000000000003", Node: "node3", Created: t0}); err != nil {
		t.Fatal(err)
	}
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "reasoning", JobID: "1003", Host: "node3", Port: 8081,
		State: endpoints.StateReady, Node: "node3", PID: 1, StartedAt: t0, Heartbeat: t0, LeaseExpires: t0.Add(time.Minute),
		RunID: "0123456789abcdef", Term: 2, Serving: "3 of 3 nodes, context 131072"}
	if err := endpoints.Write(dir, e); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteMembers(&out, k.Members(), t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"MEMBERS reasoning (term 2, leader job 1003, serving on 3 of 3 nodes, context 131072)",
		"1003  node3  leader  ready  2     8s          1001,1002",
		"1001  node1  worker  ready  2     8s          -",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("members view lacks %q:\n%s", want, out.String())
		}
	}

	if err := k.AskLeader("reasoning", members.RequestGrow); err != nil {
		t.Fatal(err)
	}
	c, err := store.Read()
	if err != nil || c.Request == nil || c.Request.Action != members.RequestGrow || !c.Request.At.Equal(t0) {
		t.Errorf("the request read back: %+v, %v", c.Request, err)
	}
	if err := k.AskLeader("fast", members.RequestHandover); err == nil || !strings.Contains(err.Error(), "not elastic") {
		t.Errorf("asking a tier that is not elastic: %v", err)
	}
	if err := k.AskLeader("slow", members.RequestGrow); !errors.Is(err, ErrUnknownTier) {
		t.Errorf("asking an unknown tier: %v", err)
	}
}

// TestUnreadableTopTermHasItsLeader: when the highest term's file cannot be
// read (a newer schema during a rolling upgrade, a damaged file), the members
// take the number from its name and a live member that says it leads that
// term leads (issue 30); status and the leading gauge follow them, rather
// than the term below it, which nobody leads any more (the "members but no
// leader" alert would fire for a tier that has one).
func TestUnreadableTopTermHasItsLeader(t *testing.T) {
	dir := t.TempDir()
	el := testTier()
	el.Name, el.JobName, el.Members = "reasoning", "llm-reasoning", 2
	cfg := testConfig(t, testTier(), el)
	cfg.EndpointDir = dir
	me := uint32(os.Getuid())
	k := New(cfg, Options{Now: func() time.Time { return t0 }, Owner: &me})
	store := members.NewStore(dir, "reasoning", nil)
	if err := store.TakeTerm(members.Term{Schema: members.SchemaVersion, N: 2, JobID: "1001", RunID: "0000000000000001", Node: "node1", Created: t0}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store.Dir(), "term-3.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, x := range []members.Member{
		{JobID: "1001", Node: "node1", Term: 2},
		{JobID: "1002", Node: "node2", Term: 3, Leads: true},
	} {
		x.Schema, x.Tier, x.RunID, x.Addr, x.RPCPort, x.State = members.SchemaVersion, "reasoning", "000000000000"+x.JobID, "10.78.0.1", 50052, members.StateReady
		x.Heartbeat, x.LeaseExpires = t0, t0.Add(10*time.Second)
		if err := store.WriteMember(x); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := WriteMembers(&out, k.Members(), t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"MEMBERS reasoning (term 3, its file unreadable, leader job 1002)",
		"1002  node2  leader  ready  3",
		"ignored term-3.json",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("members view lacks %q:\n%s", want, out.String())
		}
	}
	if got := scrape(t, k); got[`llm_keeper_members{state="leading",tier="reasoning"}`] != 1 {
		t.Errorf("leading = %v, want 1", got[`llm_keeper_members{state="leading",tier="reasoning"}`])
	}
}
