// Package catalog is what the heads serve, as the front door lists it:
// each head's /v1/models answer (Models, read by Fetch: the OpenAI "data"
// objects, and in router mode each model's status) and the front door's
// own GET /v1/models, every routed head's models once with the tier they
// are routed to (Merge). It asks a head only when told to and routes
// nothing: which heads are routed, when they are polled and which tier
// serves a name are the front door's.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"net/http"
	"slices"
)

// Models is one /v1/models answer of a head: each model's entry as the
// head gave it (passed on unchanged but for the tier the front door adds)
// and, in router mode, its status. A nil *Models is a head not read yet:
// it serves nothing it says.
type Models struct {
	byID map[string]entry
}

// entry is one model of a head's /v1/models.
type entry struct {
	raw    map[string]json.RawMessage
	status string // status.value in router mode ("loaded", "loading", "unloaded", "sleeping", "failed"); "" otherwise
}

// Serves reports whether the answer lists model.
func (m *Models) Serves(model string) bool {
	if m == nil {
		return false
	}
	_, ok := m.byID[model]
	return ok
}

// Failed reports whether the head's router says model failed to load.
func (m *Models) Failed(model string) bool { return m != nil && m.byID[model].status == "failed" }

// IDs are the models the answer lists, in no order.
func (m *Models) IDs() iter.Seq[string] {
	if m == nil {
		return func(func(string) bool) {}
	}
	return maps.Keys(m.byID)
}

// maxModelsBody bounds a head's /v1/models answer (a router with many
// models lists their arguments too).
const maxModelsBody = 4 << 20

// Parse reads a head's /v1/models answer: data[] entries (the OpenAI
// shape, which llama-server always gives; its own models[] shape names the
// same models). An entry without an id is skipped.
func Parse(b []byte) (*Models, error) {
	var doc struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("decode /v1/models: %w", err)
	}
	hm := &Models{byID: map[string]entry{}}
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
		hm.byID[id] = entry{raw: raw, status: st.Value}
	}
	return hm, nil
}

// errModelsStatus is a /v1/models answer that is not 200.
var errModelsStatus = errors.New("/v1/models did not answer 200")

// Fetch reads the /v1/models of the head at addr (host:port), within
// ctx's deadline.
func Fetch(ctx context.Context, client *http.Client, addr string) (*Models, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
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
	return Parse(b)
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

// Head is what one routed head says it serves, for Merge: its last
// /v1/models answer (nil when not read yet) and the models its endpoint
// file lists.
type Head struct {
	Models   *Models
	Declared []string
}

// Merge is the front door's GET /v1/models: every model any of heads
// serves, once, with the tier tierOf routes it to (a model no tier serves,
// "", is left out). A head's own entry is passed on as it gave it (plus
// "tier"); a model its file lists but its /v1/models was not read yet gets
// a minimal entry. Heads are walked in the order given, and each head's
// models in name order, so the answer is stable. With only set, the models
// of that tier alone (its prefix's /v1/models).
func Merge(heads []Head, tierOf func(model string) string, only string) []byte {
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
	for _, h := range heads {
		hm := h.Models
		if hm != nil {
			for _, id := range slices.Sorted(maps.Keys(hm.byID)) {
				me := hm.byID[id]
				add(id, me.raw, statusRank(me.status))
			}
		}
		for _, id := range h.Declared {
			if hm == nil || hm.byID[id].raw == nil {
				add(id, minimalEntry(id), statusRank(""))
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
