package front

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/front/catalog"
	"slurm-llm/endpoints/tiers"
)

// head is one routed llama-server head as the front door keeps it across
// tables: where it is, its requests in flight, when it last failed before
// answering, and its last /v1/models answer. Tables share heads by key, so
// the counters outlive a routing change.
type head struct {
	key     string // tier "/" file "@" addr: one file may resolve to several addresses
	tier    string
	addr    string // host:port (an IP literal, resolved by the updater)
	file    string
	job     string
	node    string
	restart int
	// declared are the models the endpoint file lists (the head's
	// /v1/models when it became ready); set at each table.
	declared atomic.Pointer[[]string]

	inFlight    atomic.Int64
	failedUntil atomic.Int64 // unix ns; 0 when not failing
	models      atomic.Pointer[catalog.Models]
	// slots is how many requests the head serves at once (its /slots, as
	// llama-server's --parallel); 0 before it was read, -1 when it cannot
	// be (router mode): unknown is no limit.
	slots atomic.Int64
	// others is how many requests the head had, at its last load poll
	// (pollLoad), that did not come through the front door: processing
	// and deferred there beyond the front door's own (nginx's ports,
	// another front door). 0 until polled.
	others atomic.Int64
}

// capacity is how many requests through the front door h takes now: its
// slots; extra more waiting in its own queue (0 is as many as its slots,
// negative none), so that a freed slot is taken in the head's own loop
// rather than after a round trip through the front door; and as many more
// as reached it another way, so that the front door's requests stand in
// the head's first-come first-served queue as many as the others' do. 0
// is no limit (slots unknown).
func (h *head) capacity(extra int64) int64 {
	n := h.slots.Load()
	if n <= 0 {
		return 0
	}
	return n + ownQueue(n, extra) + h.others.Load()
}

// ownQueue is how many of the front door's requests wait in the own
// queue of a head of n slots, for head_queue extra: 0 is one per slot,
// negative none.
func ownQueue(n, extra int64) int64 {
	switch {
	case extra == 0:
		return n
	case extra < 0:
		return 0
	}
	return extra
}

// busy reports whether h has all the front door's requests it takes now
// (capacity; a head whose slots are unknown never has).
func (h *head) busy(extra int64) bool {
	c := h.capacity(extra)
	return c > 0 && h.inFlight.Load() >= c
}

// load is what h has now as far as the front door knows: its own
// requests and the others at the last poll (least loaded first).
func (h *head) load() int64 { return h.inFlight.Load() + h.others.Load() }

// serves reports whether the head serves model: its file lists it, or its
// last /v1/models answer does.
func (h *head) serves(model string) bool {
	if d := h.declared.Load(); d != nil && slices.Contains(*d, model) {
		return true
	}
	return h.models.Load().Serves(model)
}

// modelNames appends to out the model names h serves: its file's and its
// last /v1/models answer's (a name may come twice).
func (h *head) modelNames(out []string) []string {
	if d := h.declared.Load(); d != nil {
		out = append(out, *d...)
	}
	return slices.AppendSeq(out, h.models.Load().IDs())
}

// failedModel reports whether the head's router says model failed to load.
func (h *head) failedModel(model string) bool {
	return h.models.Load().Failed(model)
}

// failing reports whether the head is skipped at now after a failure.
func (h *head) failing(now time.Time) bool { return now.UnixNano() < h.failedUntil.Load() }

// table is one routing snapshot, made from one updater pass and never
// changed after: the routed heads of each tier, its view, and what the
// pass's endpoint files say each tier serves.
type table struct {
	at    time.Time
	heads map[string][]*head // tier → heads routed to its own endpoints, by key
	views map[string]tiers.TierView
	// draining are, per tier, the heads whose file says draining (their
	// requests in flight finish; nothing new goes there); drainingFiles
	// the same files as a set.
	draining      map[string][]string
	drainingFiles map[string]bool
	// fileModels are the models any file of the tier lists (live or not):
	// a starting or draining tier still names what it will serve.
	fileModels map[string][]string
}

// buildTable makes the table of a pass. Heads already known (by key) are
// reused, so their counters and model lists carry over; the returned map
// holds the heads of this table only.
func buildTable(rep tiers.Report, known map[string]*head) (*table, map[string]*head) {
	t := &table{at: rep.Time, heads: map[string][]*head{}, views: map[string]tiers.TierView{},
		draining: map[string][]string{}, drainingFiles: map[string]bool{}, fileModels: map[string][]string{}}
	byFile := map[string]endpoints.Decision{}
	for _, d := range rep.Decisions {
		byFile[d.File] = d
		e := d.Endpoint
		t.fileModels[e.Tier] = append(t.fileModels[e.Tier], e.Models...)
		if e.State == endpoints.StateDraining && !rep.Time.After(e.LeaseExpires) {
			t.draining[e.Tier] = append(t.draining[e.Tier], d.File)
			t.drainingFiles[d.File] = true
		}
	}
	for tier, ms := range t.fileModels {
		slices.Sort(ms)
		t.fileModels[tier] = slices.Compact(ms)
	}
	next := map[string]*head{}
	for _, tier := range slices.Sorted(maps.Keys(rep.Live)) {
		for _, s := range rep.Live[tier] {
			d, ok := byFile[s.File]
			if !ok || !d.Live {
				continue
			}
			key := tier + "/" + s.File + "@" + s.Addr
			h := known[key]
			if h == nil || h.restart != d.Endpoint.RestartCount {
				h = &head{key: key, tier: tier, addr: s.Addr, file: s.File, job: d.Endpoint.JobID,
					node: d.Endpoint.Node, restart: d.Endpoint.RestartCount}
			}
			models := slices.Clone(d.Endpoint.Models)
			h.declared.Store(&models)
			next[key] = h
			t.heads[tier] = append(t.heads[tier], h)
		}
	}
	for _, v := range rep.Views {
		t.views[v.Tier] = v
	}
	return t, next
}

// routed reports whether the tier has a head in the table.
func (t *table) routed(tier string) bool { return len(t.heads[tier]) > 0 }

// allHeads lists every head of the table, tiers in order.
func (t *table) allHeads() []*head {
	var out []*head
	for _, tier := range slices.Sorted(maps.Keys(t.heads)) {
		out = append(out, t.heads[tier]...)
	}
	return out
}
