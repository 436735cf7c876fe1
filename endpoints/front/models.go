package front

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"slurm-llm/endpoints/front/catalog"
)

// mergedModels is the front door's GET /v1/models (catalog.Merge): every
// model the table's routed heads serve, tiers and heads in order, with
// the tier the front door routes it to; with only set, that tier's.
func mergedModels(t *table, tierOf func(string) string, only string) []byte {
	heads := t.allHeads()
	listed := make([]catalog.Head, len(heads))
	for i, h := range heads {
		listed[i].Models = h.models.Load()
		if d := h.declared.Load(); d != nil {
			listed[i].Declared = *d
		}
	}
	return catalog.Merge(listed, tierOf, only)
}

// poller reads each routed head's /v1/models every refresh interval, a few
// heads at a time, and keeps the answers on the heads. A head that does not
// answer keeps its last answer: routing never waits on it.
type poller struct {
	client  *http.Client
	timeout time.Duration
}

// pollAll asks every head once, at most 8 at a time, and returns when all
// are done (each bounded by the poller's timeout).
func (p *poller) pollAll(ctx context.Context, heads []*head) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, h := range heads {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if hm, err := p.poll(ctx, h); err == nil {
				h.models.Store(hm)
			}
			if h.slots.Load() == 0 {
				p.pollSlots(ctx, h)
			}
		}()
	}
	wg.Wait()
}

// poll reads one head's /v1/models.
func (p *poller) poll(ctx context.Context, h *head) (*catalog.Models, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return catalog.Fetch(ctx, p.client, h.addr)
}

// maxSlotsBody bounds a head's /slots answer read to count its slots.
const maxSlotsBody = 4 << 20

// pollSlots reads how many requests h serves at once: the entries of its
// /slots (one per --parallel slot). A head that has no such endpoint (a
// router without ?model=, a server run with --no-slots: 4xx/501) gets -1,
// no limit, and is not asked again; one that does not answer is asked at
// the next refresh.
func (p *poller) pollSlots(ctx context.Context, h *head) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.addr+"/slots", nil)
	if err != nil {
		return
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 400 && resp.StatusCode < 600 && resp.StatusCode != http.StatusServiceUnavailable {
			h.slots.Store(-1)
		}
		return
	}
	var slots []json.RawMessage
	if json.NewDecoder(io.LimitReader(resp.Body, maxSlotsBody)).Decode(&slots) != nil || len(slots) == 0 {
		h.slots.Store(-1)
		return
	}
	h.slots.Store(int64(len(slots)))
}
