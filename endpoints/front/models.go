package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"
)

// headModels is one /v1/models answer of a head: each model's entry as the
// head gave it (the OpenAI "data" objects, passed on unchanged but for
// the tier the front door adds) and, in router mode, its status.
type headModels struct {
	byID map[string]modelEntry
	at   time.Time
}

// modelEntry is one model of a head's /v1/models.
type modelEntry struct {
	raw    map[string]json.RawMessage
	status string // status.value in router mode ("loaded", "loading", "unloaded", "sleeping", "failed"); "" otherwise
}

// maxModelsBody bounds a head's /v1/models answer (a router with many
// models lists their arguments too).
const maxModelsBody = 4 << 20

// parseModels reads a head's /v1/models answer: data[] entries (the OpenAI
// shape, which llama-server always gives; its own models[] shape names the
// same models). An entry without an id is skipped.
func parseModels(b []byte, at time.Time) (*headModels, error) {
	var doc struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decode /v1/models: %w", err)
	}
	hm := &headModels{byID: map[string]modelEntry{}, at: at}
	for _, raw := range doc.Data {
		var id string
		if json.Unmarshal(raw["id"], &id) != nil || id == "" {
			continue
		}
		var st struct {
			Value string `json:"value"`
		}
		if s, ok := raw["status"]; ok {
			_ = json.Unmarshal(s, &st)
		}
		hm.byID[id] = modelEntry{raw: raw, status: st.Value}
	}
	return hm, nil
}

// statusRank orders router statuses from best to worst, for the merged
// list: a model loaded on one replica is "loaded" for clients.
func statusRank(s string) int {
	switch s {
	case "loaded":
		return 0
	case "", "loading":
		return 1
	case "sleeping", "unloaded":
		return 2
	}
	return 3 // failed, or unknown words
}

// mergedModels is the front door's GET /v1/models: every model any routed
// head serves, once, with the tier the front door routes it to. A head's
// own entry is passed on as it gave it (plus "tier"); a model its file
// lists but its /v1/models was not read yet gets a minimal entry. Tiers
// and heads are walked in order, so the answer is stable. With only set,
// the models of that tier alone (its prefix's /v1/models).
func mergedModels(t *table, tierOf func(string) string, only string) []byte {
	type merged struct {
		entry map[string]json.RawMessage
		rank  int
	}
	out := map[string]merged{}
	var order []string
	add := func(id string, entry map[string]json.RawMessage, rank int) {
		tier := tierOf(id)
		if tier == "" || only != "" && tier != only {
			return
		}
		e := maps.Clone(entry)
		e["tier"], _ = json.Marshal(tier)
		if _, ok := e["status"]; !ok {
			// A routed head's model is loaded (a router's entries say
			// their own): llama-server's web UI lists it as a router's.
			e["status"] = json.RawMessage(`{"value":"loaded"}`)
		}
		prev, seen := out[id]
		if !seen {
			order = append(order, id)
		}
		if !seen || rank < prev.rank {
			out[id] = merged{entry: e, rank: rank}
		}
	}
	for _, h := range t.allHeads() {
		hm := h.models.Load()
		if hm != nil {
			for _, id := range slices.Sorted(maps.Keys(hm.byID)) {
				me := hm.byID[id]
				add(id, me.raw, statusRank(me.status))
			}
		}
		if d := h.declared.Load(); d != nil {
			for _, id := range *d {
				if hm == nil || hm.byID[id].raw == nil {
					add(id, minimalEntry(id), statusRank(""))
				}
			}
		}
	}
	data := make([]map[string]json.RawMessage, 0, len(order))
	for _, id := range order {
		data = append(data, out[id].entry)
	}
	b, _ := json.Marshal(struct {
		Object string                       `json:"object"`
		Data   []map[string]json.RawMessage `json:"data"`
	}{"list", data})
	return append(b, '\n')
}

// minimalEntry is the OpenAI model object of a model known only by name.
func minimalEntry(id string) map[string]json.RawMessage {
	q, _ := json.Marshal(id)
	return map[string]json.RawMessage{"id": q, "object": json.RawMessage(`"model"`), "owned_by": json.RawMessage(`"llamacpp"`)}
}

// poller reads each routed head's /v1/models every refresh interval, a few
// heads at a time, and keeps the answers on the heads. A head that does not
// answer keeps its last answer: routing never waits on it.
type poller struct {
	client  *http.Client
	timeout time.Duration
	now     func() time.Time
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

// errModelsStatus is a /v1/models answer that is not 200.
var errModelsStatus = errors.New("/v1/models did not answer 200")

// poll reads one head's /v1/models.
func (p *poller) poll(ctx context.Context, h *head) (*headModels, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.addr+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBody+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %d %s", errModelsStatus, resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 200)]))
	}
	if len(b) > maxModelsBody {
		return nil, fmt.Errorf("/v1/models: larger than %d bytes", maxModelsBody)
	}
	return parseModels(b, p.now())
}

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
	if json.NewDecoder(io.LimitReader(resp.Body, maxModelsBody)).Decode(&slots) != nil || len(slots) == 0 {
		h.slots.Store(-1)
		return
	}
	h.slots.Store(int64(len(slots)))
}
