package front

import (
	"context"
	"sync"
	"time"

	"slurm-llm/endpoints/front/headload"
)

// What a head really has (issue 38): the front door counts the requests
// it sent to a head, but a head also serves requests that reached it
// another way (nginx's ports, another front door). While a head has as
// many of the front door's requests as its slots, the front door asks it
// every load_refresh what it has (llama-server's /metrics, or /slots) and
// counts the rest as the head's others (head.others): each of them lets
// one more of the front door's requests into the head's first-come,
// first-served queue, so that the front door's clients stand there as the
// others do instead of waiting behind them in the front door.

// pollLoad asks h what it has (headload.Read) and sets h.others to what is
// beyond the front door's own requests (ours: h's in-flight count when the
// answer came; a request of the front door on its way there or back is not
// on the head, so others is at worst counted short).
func (p *poller) pollLoad(ctx context.Context, h *head, refresh time.Duration) error {
	l, err := headload.Read(ctx, p.client, h.addr, loadTimeout(p.timeout, refresh))
	if err != nil {
		return err
	}
	h.others.Store(max(0, l.Total()-h.inFlight.Load()))
	return nil
}

// loadTimeout bounds one load poll: five load_refresh rounds, at least
// 500 ms, at most the heads' other polls' bound. A poll that has no answer
// by then tells nothing a round later would not, and while one waits no
// other round runs: the real llama-server, busy, sometimes left /metrics
// unanswered on a connection for the whole of the 2 s bound, twice in a
// row (issue 38), and the front door's count of the head's others stood
// still meanwhile, its clients held behind nginx's.
func loadTimeout(bound, refresh time.Duration) time.Duration {
	return min(bound, max(5*refresh, 500*time.Millisecond))
}

// loadPolled reports whether h is asked what it has at this round: it
// has a known number of slots, and the front door's requests fill them
// (below that, the front door sends it one more whatever others it has),
// or the last poll found others (to see them go).
func loadPolled(h *head) bool {
	n := h.slots.Load()
	return n > 0 && (h.inFlight.Load() >= n || h.others.Load() > 0)
}

// pollLoads asks every head that loadPolled picks what it has, at most 8
// at a time, and then looks at every held request again (a head with
// more others takes more). A head that does not answer keeps its last
// count.
func (s *Server) pollLoads(ctx context.Context) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, h := range s.tab.Load().allHeads() {
		if !loadPolled(h) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.poller.pollLoad(ctx, h, s.cfg.Load().LoadRefresh); err != nil {
				s.log.Debug("cannot read a head's load", "tier", h.tier, "head", h.addr, "error", err)
			}
		}()
	}
	wg.Wait()
	for _, q := range s.allQueues() {
		if q.waiting.Load() > 0 {
			s.dispatch(q)
		}
	}
}

// runLoads polls the heads' load every load_refresh until ctx ends.
func (s *Server) runLoads(ctx context.Context) {
	tick := time.NewTimer(s.cfg.Load().LoadRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.pollLoads(ctx)
		tick.Reset(s.cfg.Load().LoadRefresh)
	}
}
