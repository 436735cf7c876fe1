package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Keys are the top-level keys of a request body the front door reads: the
// model it routes by, whether it streams, and what decides whether a cut
// stream may be continued. Each is the raw JSON value, nil when the key is
// absent. Keys are matched exactly, as the head reads them ("MODEL" is not
// "model"): Go's case-insensitive struct decoding routed
// {"model":"a","MODEL":"b"} by b while the head served a.
type Keys struct {
	// Model is "model", at offset ModelAt in the body (-1 when absent).
	Model   []byte
	ModelAt int
	// Stream is set when "stream" is true.
	Stream bool
	// What continuation looks at: "n", "logprobs", "top_logprobs",
	// "n_probs", "grammar", "json_schema", "response_format".
	N, Logprobs, TopLogprobs, NProbs, Grammar, JSONSchema, ResponseFormat []byte
	// StreamOptions is "stream_options" (a chat stream's usage chunk is
	// asked there), at offset StreamOptionsAt (-1 when absent).
	StreamOptions   []byte
	StreamOptionsAt int
}

// Errors of a body the front door cannot route.
var (
	errBodyNotObject = errors.New("the body is not a JSON object")
	errBodyJSON      = errors.New("the body is not valid JSON")
)

// ReadKeys walks the body's top level once, without decoding it. A body
// that is not a JSON object (null, an array, a string) is refused, and so
// is one naming "model" or "stream" twice (which one a parser keeps is its
// own choice: the front door and the head could read different models).
// The errors say so to the client.
func ReadKeys(body []byte) (Keys, error) {
	k := Keys{ModelAt: -1, StreamOptionsAt: -1}
	var dup string
	var streamSeen bool
	err := EachKey(body, func(key, val []byte, at int) bool {
		switch {
		case KeyIs(key, "model"):
			if k.ModelAt >= 0 {
				dup = "model"
				return false
			}
			k.Model, k.ModelAt = val, at
		case KeyIs(key, "stream"):
			if streamSeen {
				dup = "stream"
				return false
			}
			streamSeen, k.Stream = true, string(val) == "true"
		case KeyIs(key, "n"):
			k.N = val
		case KeyIs(key, "logprobs"):
			k.Logprobs = val
		case KeyIs(key, "top_logprobs"):
			k.TopLogprobs = val
		case KeyIs(key, "n_probs"):
			k.NProbs = val
		case KeyIs(key, "grammar"):
			k.Grammar = val
		case KeyIs(key, "json_schema"):
			k.JSONSchema = val
		case KeyIs(key, "response_format"):
			k.ResponseFormat = val
		case KeyIs(key, "stream_options"):
			k.StreamOptions, k.StreamOptionsAt = val, at
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

// ModelName is the request's "model": "" when absent or null; ok is false
// when it is there but not a string.
func (k Keys) ModelName() (string, bool) {
	if IsNull(k.Model) {
		return "", true
	}
	return StringValue(k.Model)
}

// UsageAsked reports whether a chat stream's request asks for its usage
// chunk (stream_options.include_usage).
func (k Keys) UsageAsked() bool {
	asked := false
	_ = EachKey(k.StreamOptions, func(key, val []byte, _ int) bool {
		if KeyIs(key, "include_usage") {
			asked = string(val) == "true"
		}
		return true
	})
	return asked
}

// Edit is one change to a body's bytes (SetModel, AskUsage), made by
// Apply: n bytes at offset at become raw (n 0: raw inserted).
type Edit struct {
	at, n int
	raw   []byte
}

// Apply returns body with edits made; their spans do not overlap, so they
// are made from the last to the first and each offset holds. The body is
// copied once, never re-encoded.
func Apply(body []byte, edits ...Edit) []byte {
	slices.SortFunc(edits, func(a, b Edit) int { return b.at - a.at })
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
func first(body []byte, key string, raw []byte) Edit {
	open := skipWS(body, 0) + 1 // ReadKeys made sure it is '{'
	q, _ := json.Marshal(key)
	v := append(append(q, ':'), raw...)
	if i := skipWS(body, open); i < len(body) && body[i] != '}' {
		v = append(v, ',')
	}
	return Edit{at: open, raw: v}
}

// SetModel is the edit that sets the body's "model" to name (an alias, or
// the default model, becomes the name the head serves): the value's bytes
// replaced, or the key added first. k is the body's (ReadKeys).
func SetModel(body []byte, k Keys, name string) Edit {
	q, _ := json.Marshal(name)
	if k.ModelAt >= 0 {
		return Edit{at: k.ModelAt, n: len(k.Model), raw: q}
	}
	return first(body, "model", q)
}

// AskUsage is the edit that sets stream_options.include_usage in a
// stream's body: the head then ends the stream with the answer's usage,
// the only exact count of its tokens (the front door drops that chunk for
// a client that did not ask for it). A stream_options that is not an
// object (null: llama.cpp reads it as absent) is replaced.
func AskUsage(body []byte, k Keys) Edit {
	if k.StreamOptionsAt < 0 {
		return first(body, "stream_options", []byte(`{"include_usage":true}`))
	}
	var opts map[string]json.RawMessage
	if json.Unmarshal(k.StreamOptions, &opts) != nil || opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	return Edit{at: k.StreamOptionsAt, n: len(k.StreamOptions), raw: raw}
}
