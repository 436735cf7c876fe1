package tiers

import (
	"context"
	"net"
	"slurm-llm/endpoints"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHintMessage(t *testing.T) {
	if d := cmp.Diff("fast 1234_5\n", string(endpoints.HintMessage("fast", "1234_5"))); d != "" {
		t.Errorf("HintMessage (-want +got):\n%s", d)
	}
}

// listenHints listens on a free loopback port, closed when the test ends.
func listenHints(t *testing.T) *endpoints.Hints {
	t.Helper()
	h, err := endpoints.ListenHints("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A hint wakes watch for one pass, without any file event or sweep.
func TestWatchPassesOnHint(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	hints := listenHints(t)
	u := New(cfg, Options{Now: func() time.Time { return t0 }})
	h := startWatchWith(t, u, WatchOptions{Hints: hints})
	h.waitFor("the first pass", func(Report) bool { return true })
	if err := endpoints.SendHint(context.Background(), hints.Addr().String(), "fast", "1"); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a pass after the hint", func(Report) bool { return true })
}

// A flood of hints runs passes at most once per coalesce interval, never
// back to back.
func TestWatchHintFloodIsCoalesced(t *testing.T) {
	cfg := testConfig(t)
	cfg.SweepInterval = time.Hour
	cfg.Coalesce = 50 * time.Millisecond
	hints := listenHints(t)
	u := New(cfg, Options{})
	h := startWatchWith(t, u, WatchOptions{Hints: hints})
	h.waitFor("the first pass", func(Report) bool { return true })
	conn, err := net.Dial("udp", hints.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stop := time.Now().Add(500 * time.Millisecond)
	var starts []time.Time
	for time.Now().Before(stop) {
		for i := 0; i < 50; i++ {
			_, _ = conn.Write(endpoints.HintMessage("fast", "1"))
		}
		select {
		case p := <-h.passed:
			starts = append(starts, p.Report.Time)
		default:
		}
	}
	h.waitFor("a pass after the flood", func(r Report) bool { starts = append(starts, r.Time); return true })
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < cfg.Coalesce {
			t.Errorf("passes %d and %d started %v apart, less than coalesce (%v)", i-1, i, gap, cfg.Coalesce)
		}
	}
	if max := int(500*time.Millisecond/cfg.Coalesce) + 2; len(starts) > max {
		t.Errorf("%d passes in 0.5 s of hints, want at most %d", len(starts), max)
	}
}

// A tier config's hint_addr may name the watcher's and the front door's
// listeners: each gets the hint.
func TestSendHintToSeveralListeners(t *testing.T) {
	a, b := listenHints(t), listenHints(t)
	if err := endpoints.SendHint(context.Background(), a.Addr().String()+", "+b.Addr().String(), "fast", "1"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*endpoints.Hints{a, b} {
		select {
		case <-h.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("no hint on %s", h.Addr())
		}
	}
}
