package front

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// reqKeys are the top-level keys of a request body the front door reads:
// the model it routes by, whether it streams, and what decides whether a
// cut stream may be continued. Each is the raw JSON value, nil when the
// key is absent. Keys are matched exactly, as the head reads them
// ("MODEL" is not "model"): Go's case-insensitive struct decoding routed
// {"model":"a","MODEL":"b"} by b while the head served a.
type reqKeys struct {
	model   []byte
	modelAt int // offset of model's value in the body; -1 when absent
	stream  bool
	// What continuation looks at (refusedBecause).
	n, logprobs, topLogprobs, nProbs, grammar, jsonSchema, responseFormat []byte
	// streamOptions is "stream_options" (a chat stream's usage chunk is
	// asked there), at its offset; -1 when absent.
	streamOptions   []byte
	streamOptionsAt int
}

// Errors of a body the front door cannot route.
var (
	errBodyNotObject = errors.New("the body is not a JSON object")
	errBodyJSON      = errors.New("the body is not valid JSON")
)

// readKeys walks the body's top level once, without decoding it. A body
// that is not a JSON object (null, an array, a string) is refused, and so
// is one naming "model" or "stream" twice (which one a parser keeps is its
// own choice: the front door and the head could read different models).
func readKeys(body []byte) (reqKeys, error) {
	k := reqKeys{modelAt: -1, streamOptionsAt: -1}
	var dup string
	var streamSeen bool
	err := eachKey(body, func(key, val []byte, at int) bool {
		switch {
		case keyIs(key, "model"):
			if k.modelAt >= 0 {
				dup = "model"
				return false
			}
			k.model, k.modelAt = val, at
		case keyIs(key, "stream"):
			if streamSeen {
				dup = "stream"
				return false
			}
			streamSeen, k.stream = true, string(val) == "true"
		case keyIs(key, "n"):
			k.n = val
		case keyIs(key, "logprobs"):
			k.logprobs = val
		case keyIs(key, "top_logprobs"):
			k.topLogprobs = val
		case keyIs(key, "n_probs"):
			k.nProbs = val
		case keyIs(key, "grammar"):
			k.grammar = val
		case keyIs(key, "json_schema"):
			k.jsonSchema = val
		case keyIs(key, "response_format"):
			k.responseFormat = val
		case keyIs(key, "stream_options"):
			k.streamOptions, k.streamOptionsAt = val, at
		}
		return true
	})
	switch {
	case errors.Is(err, errNotObject):
		return k, errBodyNotObject
	case err != nil:
		return k, errBodyJSON
	case dup != "":
		return k, fmt.Errorf("the body names %q twice", dup)
	}
	return k, nil
}

// modelName is the request's "model": "" when absent or null; ok is false
// when it is there but not a string.
func (k reqKeys) modelName() (string, bool) {
	if isNull(k.model) {
		return "", true
	}
	return stringValue(k.model)
}

// usageAsked reports whether a chat stream's request asks for its usage
// chunk (stream_options.include_usage).
func (k reqKeys) usageAsked() bool {
	asked := false
	_ = eachKey(k.streamOptions, func(key, val []byte, _ int) bool {
		if keyIs(key, "include_usage") {
			asked = string(val) == "true"
		}
		return true
	})
	return asked
}

// edit is one change to a body's bytes: n bytes at offset at become raw
// (n 0: raw inserted).
type edit struct {
	at, n int
	raw   []byte
}

// apply returns body with edits made; their spans do not overlap, so they
// are made from the last to the first and each offset holds.
func apply(body []byte, edits ...edit) []byte {
	slices.SortFunc(edits, func(a, b edit) int { return b.at - a.at })
	size := len(body)
	for _, e := range edits {
		size += len(e.raw) - e.n
	}
	out := make([]byte, 0, size)
	end := len(body)
	var tail [][]byte
	for _, e := range edits {
		tail = append(tail, body[e.at+e.n:end], e.raw)
		end = e.at
	}
	out = append(out, body[:end]...)
	for i := len(tail) - 1; i >= 0; i-- {
		out = append(out, tail[i]...)
	}
	return out
}

// first is where a key inserted first in the object body goes: after its
// '{', with the comma it then needs.
func first(body []byte, key string, raw []byte) edit {
	open := skipWS(body, 0) + 1 // readKeys made sure it is '{'
	q, _ := json.Marshal(key)
	v := append(append(q, ':'), raw...)
	if i := skipWS(body, open); i < len(body) && body[i] != '}' {
		v = append(v, ',')
	}
	return edit{at: open, raw: v}
}

// setModel is the edit that sets the body's "model" to name (an alias, or
// the default model, becomes the name the head serves): the value's bytes
// replaced, or the key added first.
func setModel(body []byte, k reqKeys, name string) edit {
	q, _ := json.Marshal(name)
	if k.modelAt >= 0 {
		return edit{at: k.modelAt, n: len(k.model), raw: q}
	}
	return first(body, "model", q)
}

// askUsage is the edit that sets stream_options.include_usage in a
// stream's body: the head then ends the stream with the answer's usage,
// the only exact count of its tokens (the front door drops that chunk for
// a client that did not ask for it). A stream_options that is not an
// object (null: llama.cpp reads it as absent) is replaced.
func askUsage(body []byte, k reqKeys) edit {
	if k.streamOptionsAt < 0 {
		return first(body, "stream_options", []byte(`{"include_usage":true}`))
	}
	var opts map[string]json.RawMessage
	if json.Unmarshal(k.streamOptions, &opts) != nil || opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	return edit{at: k.streamOptionsAt, n: len(k.streamOptions), raw: raw}
}
