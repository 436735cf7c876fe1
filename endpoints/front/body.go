package front

import (
	"encoding/json"
	"errors"
	"fmt"
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

// askUsage returns the body of a chat stream with
// stream_options.include_usage set: the head then ends the stream with the
// answer's usage, the only exact count of its tokens (the front door
// drops that chunk from a client that did not ask for it).
func askUsage(body []byte, k reqKeys) []byte {
	if k.streamOptionsAt < 0 {
		return insertKey(body, "stream_options", []byte(`{"include_usage":true}`))
	}
	if string(k.streamOptions) == "null" { // no options, as when absent
		return replaceAt(body, k.streamOptionsAt, len(k.streamOptions), []byte(`{"include_usage":true}`))
	}
	var opts map[string]json.RawMessage
	if json.Unmarshal(k.streamOptions, &opts) != nil || opts == nil {
		return body // not an object: the head's to refuse
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	return replaceAt(body, k.streamOptionsAt, len(k.streamOptions), raw)
}

// insertKey returns the object body with key: raw added first.
func insertKey(body []byte, key string, raw []byte) []byte {
	open := skipWS(body, 0) + 1 // readKeys made sure it is '{'
	q, _ := json.Marshal(key)
	out := make([]byte, 0, len(body)+len(q)+len(raw)+2)
	out = append(out, body[:open]...)
	out = append(append(append(out, q...), ':'), raw...)
	if i := skipWS(body, open); i < len(body) && body[i] != '}' {
		out = append(out, ',')
	}
	return append(out, body[open:]...)
}

// replaceAt returns body with the n bytes at offset at replaced by raw.
func replaceAt(body []byte, at, n int, raw []byte) []byte {
	out := make([]byte, 0, len(body)-n+len(raw))
	out = append(out, body[:at]...)
	out = append(out, raw...)
	return append(out, body[at+n:]...)
}

// setModel returns the body with its "model" set to name (an alias, or
// the default model, becomes the name the head serves): the value's bytes
// are replaced, or the key added first; nothing else of the body changes.
func setModel(body []byte, k reqKeys, name string) []byte {
	q, _ := json.Marshal(name)
	if k.modelAt >= 0 {
		return replaceAt(body, k.modelAt, len(k.model), q)
	}
	return insertKey(body, "model", q)
}
