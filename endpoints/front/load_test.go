package front

import (
	"net/http"
	"testing"
	"time"
)

// TestOthersOnTheHeadLetMoreIn: the front door counted only the requests
// it sent itself against a head's slots and held the rest, so with
// nginx's clients filling the head's own queue its clients got 170
// answers where nginx's got 1312 (issue 38). What the head says it has
// beyond the front door's own (its /metrics) lets as many more of the
// front door's requests into its queue; when they are gone, the front
// door holds again.
func TestOthersOnTheHeadLetMoreIn(t *testing.T) {
	r := newRig(t, noHeadQueue)
	sh := newSlotHead(t, 1)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	done := make(chan int, 3)
	send := func(tag string) {
		go func() { code, _, _ := r.do("qwen-a", tag); done <- code }()
	}
	send("r0")
	waitFor(t, "r0 at the head", func() bool { return len(sh.seen()) == 1 })
	send("r1")
	send("r2")
	waitFor(t, "r1 and r2 held", func() bool { return r.held("fast") == 2 })
	sh.setMetrics(1, 2) // r0, and two that came through nginx
	r.s.pollLoads(t.Context())
	h := r.s.tab.Load().heads["fast"][0]
	if got := h.others.Load(); got != 2 {
		t.Errorf("others %d, want 2", got)
	}
	for _, ts := range r.s.Status().Tiers {
		if ts.Tier == "fast" && (len(ts.Heads) != 1 || ts.Heads[0].Slots != 1 || ts.Heads[0].Others != 2) {
			t.Errorf("/status heads %+v, want slots 1, others 2", ts.Heads)
		}
	}
	waitFor(t, "r1 and r2 at the head", func() bool { return len(sh.seen()) == 3 && r.held("fast") == 0 })
	sh.setMetrics(3, 0) // nginx's are gone; the head has the front door's three
	r.s.pollLoads(t.Context())
	if got := h.others.Load(); got != 0 {
		t.Errorf("others %d once nginx's requests are gone, want 0", got)
	}
	send("r3")
	waitFor(t, "r3 held", func() bool { return r.held("fast") == 1 })
	for range 4 {
		sh.release <- struct{}{}
	}
	for range 4 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("answered %d", code)
		}
	}
}

// TestLoadFromSlotsWithoutMetrics: a head run without --metrics (501) is
// asked its /slots: those processing beyond the front door's own are
// others (its deferred ones it does not say).
func TestLoadFromSlotsWithoutMetrics(t *testing.T) {
	r := newRig(t, noHeadQueue)
	sh := newSlotHead(t, 2)
	r.route(nil, sh.testHead)
	r.s.poller.pollAll(t.Context(), r.s.tab.Load().allHeads())
	h := r.s.tab.Load().heads["fast"][0]
	h.inFlight.Add(2) // as if two of the front door's were there
	defer h.inFlight.Add(-2)
	if err := r.s.poller.pollLoad(t.Context(), h, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// newSlotHead's /slots says every slot idle: the front door's own are
	// on their way, none are others.
	if got := h.others.Load(); got != 0 {
		t.Errorf("others %d, want 0", got)
	}
	if !loadPolled(h) {
		t.Errorf("a head whose slots the front door fills is not polled")
	}
}

// TestLoadTimeout: a load poll waits five load_refresh rounds, never less
// than 500 ms, never more than the heads' other polls' bound.
func TestLoadTimeout(t *testing.T) {
	for _, tc := range []struct{ bound, refresh, want time.Duration }{
		{2 * time.Second, 100 * time.Millisecond, 500 * time.Millisecond}, // the default: the floor
		{2 * time.Second, 200 * time.Millisecond, time.Second},
		{2 * time.Second, time.Second, 2 * time.Second},                          // the bound
		{300 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}, // a short models_refresh bounds it too
	} {
		if got := loadTimeout(tc.bound, tc.refresh); got != tc.want {
			t.Errorf("loadTimeout(%v, %v) = %v, want %v", tc.bound, tc.refresh, got, tc.want)
		}
	}
}
