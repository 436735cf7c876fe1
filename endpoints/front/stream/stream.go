// Package stream reads a streamed answer event by event as the front door
// passes it to its client: which shape of events a path answers (Kind),
// the head's server-sent events (ReadEvent), what the client has received
// of the answer (Answer: its text, its tokens, its finish, into a
// wire.Tally) and, when the answer is continued on another head, the
// continuation's request (Answer.Continuation) and its events rewritten
// into the first answer's (Answer.Take): one id, no repeated text, one
// finish. Whether a request's stream may be continued at all, from its
// body alone, is Refused.
//
// It owns no connection and picks no head: when a stream is cut, which
// head continues it, the hold, the metrics and the error event the client
// gets are the front door's (endpoints/front, continue.go).
package stream

import (
	"bytes"
	"encoding/json"

	"slurm-llm/endpoints/front/wire"
)

// Kind is which shape of events a stream has, by the path that answers
// it. The zero value, None, is a stream the front door does not read.
type Kind int

// The kinds of stream.
const (
	None   Kind = iota // not a stream the front door reads
	Chat               // OpenAI chat chunks, ending in [DONE]
	Raw                // llama-server's /completion events, ending with "stop": true
	Text               // OpenAI completion chunks (choices[].text): read, not continued
	Infill             // /infill: /completion's events (read as Raw), not continued
)

// KindOf is the stream shape of a request path.
func KindOf(path string) Kind {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		return Chat
	case "/completion", "/completions":
		// llama-server serves both with /completion's handler: its own
		// events, not OpenAI's (FACTS.md Q10).
		return Raw
	case "/infill":
		return Infill
	case "/v1/completions":
		return Text
	}
	return None
}

// IsRaw reports whether the kind's events are llama-server's own
// (/completion's: "content", "stop": true at the end, no [DONE]).
func (k Kind) IsRaw() bool { return k == Raw || k == Infill }

// Counted reports whether the front door asks this kind's head for its
// usage chunk (stream_options.include_usage: OpenAI's shapes).
func (k Kind) Counted() bool { return k == Chat || k == Text }

// Refused says why a request's stream will not be continued, from its
// kind and its body's keys alone; "" when it may be: a request asking for
// n > 1 choices or for logprobs (their continuity cannot be promised), or
// with a grammar, a JSON schema or a response_format (the grammar would
// restart mid-answer: structured output is not continued). What does not
// constrain the answer does not refuse it: "grammar": "",
// "response_format": {"type": "text"}, "logprobs": false.
func Refused(kind Kind, k wire.Keys) string {
	if kind == Infill {
		return "an /infill answer is not continued: its prompt is built from input_prefix and input_suffix"
	}
	if kind != Chat && kind != Raw {
		return "only /v1/chat/completions and /completion streams are continued"
	}
	num := func(raw []byte) float64 { f, _ := wire.NumberValue(raw); return f }
	switch {
	case num(k.N) > 1:
		return "it asks for more than one choice (n)"
	case string(k.Logprobs) == "true" || num(k.Logprobs) > 0 || num(k.NProbs) > 0 || num(k.TopLogprobs) > 0:
		return "it asks for logprobs, whose continuity cannot be promised"
	case constrains(k.Grammar) || constrains(k.JSONSchema) || formatConstrains(k.ResponseFormat):
		return "structured output (a grammar, a JSON schema, a response_format) is not continued: its grammar would start over mid-answer"
	}
	return ""
}

// constrains reports whether a grammar or schema value constrains the
// answer: anything but absent, null, false, "" or {}.
func constrains(raw []byte) bool {
	switch string(bytes.Join(bytes.Fields(raw), nil)) {
	case "", "null", "false", `""`, "{}":
		return false
	}
	return true
}

// formatConstrains reports whether a response_format constrains the
// answer: any but {"type": "text"} (or none).
func formatConstrains(raw []byte) bool {
	if wire.IsNull(raw) {
		return false
	}
	var f struct {
		Type string `json:"type"`
	}
	return !(json.Unmarshal(raw, &f) == nil && f.Type == "text")
}
