package stream

import (
	"encoding/json"
	"strconv"

	"slurm-llm/endpoints/front/wire"
)

// A /completion stream's events carry the id of each token they send
// (llama-server's "tokens": [id], FACTS.md Q14). A cut answer continued by
// those ids ([prompt, id, …] as the prompt; Continuation) is the very
// token sequence the head had. Its text would be tokenized again, and
// differently: at the prompt's end, and wherever the model wrote pieces
// that merge. With the ids the next head's cache (a restored slot's or its
// own) matches up to the last token, not only up to the first difference,
// and a greedy answer on a restored slot goes on byte for byte.

// rawIDs follows a /completion stream's token ids: those whose text the
// client has (sent), those the head held back (a stop word being matched:
// an event with "" content and its token), and whether none was missed.
type rawIDs struct {
	sent, held []int64
	predicted  int64 // the current head's tokens_predicted so far
	noted      bool  // an event was taken
	lost       bool  // an event without its ids, or a token never shown
}

// note takes one event's tokens, tokens_predicted and content (raw
// values). llama-server sends no event for a token that ends inside a
// UTF-8 character and names only its own token in the next one: its
// tokens_predicted then grows by more than its ids, and the ids are lost
// for this answer (its continuation goes by text).
func (r *rawIDs) note(tokens, predicted, content []byte) {
	if r.lost {
		return
	}
	r.noted = true
	p, ok := wire.NumberValue(predicted)
	if tokens == nil || !ok {
		r.lost = true
		return
	}
	n := 0
	wire.EachElem(tokens, func(val []byte) bool {
		id, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			r.lost = true
			return false
		}
		r.held = append(r.held, id)
		n++
		return true
	})
	if r.lost || int64(p)-r.predicted != int64(n) {
		r.lost = true
		return
	}
	r.predicted = int64(p)
	if s, _ := wire.StringValue(content); s != "" {
		r.sent = append(r.sent, r.held...)
		r.held = r.held[:0]
	}
}

// switched starts counting a new head's tokens_predicted (from 0).
func (r *rawIDs) switched() { r.predicted, r.held = 0, r.held[:0] }

// exact reports whether the ids of everything the client has are known.
func (r *rawIDs) exact() bool { return r.noted && !r.lost }

// prompt is the continuation's prompt: the request's own, a string or a
// single prompt of ids (an array with an id, ids and strings mixed, as
// llama-server reads one prompt), followed by the ids sent. ok is false
// for any other prompt (several prompts, multimodal).
func (r *rawIDs) prompt(raw json.RawMessage) (json.RawMessage, bool) {
	if len(r.sent) == 0 {
		return raw, true
	}
	var parts []any
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		parts = []any{s}
	} else {
		var arr []json.RawMessage
		if json.Unmarshal(raw, &arr) != nil {
			return nil, false
		}
		anID := false
		for _, e := range arr {
			var n json.Number
			var s string
			switch {
			case json.Unmarshal(e, &n) == nil:
				if _, err := n.Int64(); err != nil {
					return nil, false
				}
				anID = true
			case json.Unmarshal(e, &s) == nil:
			default:
				return nil, false
			}
			parts = append(parts, e)
		}
		if !anID {
			return nil, false // an array of strings is several prompts
		}
	}
	for _, id := range r.sent {
		parts = append(parts, id)
	}
	out, err := json.Marshal(parts)
	return out, err == nil
}
