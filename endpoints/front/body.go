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
	k := reqKeys{modelAt: -1}
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

// setModel returns the body with its "model" set to name (an alias, or
// the default model, becomes the name the head serves): the value's bytes
// are replaced, or the key added first; nothing else of the body changes.
func setModel(body []byte, k reqKeys, name string) []byte {
	q, _ := json.Marshal(name)
	if k.modelAt >= 0 {
		out := make([]byte, 0, len(body)-len(k.model)+len(q))
		out = append(out, body[:k.modelAt]...)
		out = append(out, q...)
		return append(out, body[k.modelAt+len(k.model):]...)
	}
	open := skipWS(body, 0) + 1 // readKeys made sure it is '{'
	out := make([]byte, 0, len(body)+len(q)+10)
	out = append(out, body[:open]...)
	out = append(out, `"model":`...)
	out = append(out, q...)
	if skipWS(body, open) < len(body) && body[skipWS(body, open)] != '}' {
		out = append(out, ',')
	}
	return append(out, body[open:]...)
}
