package supervisor

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The head of an elastic leader runs under a lease its shim enforces
// (tier.Process.LeaseUntil): each renewal reaches the running head's shim
// as the absolute time it names; a head restarted in the same run gets the
// latest renewal, not the plan's first lease; and no head is started once
// its lease has ended (its shim would kill it at once), until a renewal.
func TestHeadRunsOnlyUnderItsLease(t *testing.T) {
	plan := rigPlan(t, 1)
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	plan.Head.LeaseUntil = t0.Add(4 * time.Second)
	g := newFakeRig(t, plan)
	g.ready()
	head := g.l.last("head")
	if got := head.spec.LeaseUntil; !got.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("the head started with its lease until %s, want the plan's %s", got, t0.Add(4*time.Second))
	}
	renewed := g.clk.Now().Add(4 * time.Second)
	g.r.Lease(renewed)
	g.advanceFor("the renewal at the head's shim", func() bool { return len(head.leased()) == 1 }, 100*time.Millisecond)
	if d := cmp.Diff([]time.Time{renewed}, head.leased()); d != "" {
		t.Errorf("renewals at the shim (-want +got):\n%s", d)
	}

	head.end("exited", ExitResult{Code: 134})
	g.advanceFor("a new head", func() bool { return g.l.last("head") != head }, 100*time.Millisecond)
	if got := g.l.last("head").spec.LeaseUntil; !got.Equal(renewed) {
		t.Errorf("the restarted head's lease ends %s, want the latest renewal's %s", got, renewed)
	}

	// The lease ends unrenewed; the head crashes: it is not started again
	// until a renewal comes.
	second := g.l.last("head")
	g.advanceFor("the lease's end", func() bool { return !g.clk.Now().Before(renewed) }, 100*time.Millisecond)
	second.end("exited", ExitResult{Code: 134})
	for range 100 {
		g.settle()
		g.clk.Advance(100 * time.Millisecond)
	}
	if g.l.last("head") != second {
		t.Fatalf("a head was started with its lease ended %s ago", g.clk.Now().Sub(renewed))
	}
	later := g.clk.Now().Add(4 * time.Second)
	g.r.Lease(later)
	g.advanceFor("a head once the lease is renewed", func() bool { return g.l.last("head") != second }, 100*time.Millisecond)
	if got := g.l.last("head").spec.LeaseUntil; !got.Equal(later) {
		t.Errorf("the head's lease ends %s, want the renewal's %s", got, later)
	}
}
