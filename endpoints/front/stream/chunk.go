package stream

import (
	"bytes"

	"slurm-llm/endpoints/front/wire"
)

// chunkInfo is what an Answer reads of a chat chunk without decoding it:
// raw JSON values, nil when absent.
type chunkInfo struct {
	id, model, created []byte
	// content and reasoning are the first choice's delta texts (raw JSON
	// strings); finish is set when any choice has a finish reason.
	content, reasoning []byte
	toolCall, finish   bool
	finishReason       []byte // the first finish reason (raw)
	failed             bool   // an "error" key: the head's own end
	// usage is the chunk's usage (raw); usageOnly is set for the chunk
	// that holds it alone ("choices": []).
	usage     []byte
	usageOnly bool
}

// scanChat reads a chat chunk's keys; ok is false when data is not a JSON
// object.
func scanChat(data []byte) (ci chunkInfo, ok bool) {
	err := wire.EachKey(data, func(key, val []byte, _ int) bool {
		switch {
		case wire.KeyIs(key, "choices"):
			ci.usageOnly = string(bytes.TrimSpace(val)) == "[]"
			first := true
			wire.EachElem(val, func(choice []byte) bool {
				_ = wire.EachKey(choice, func(key, val []byte, _ int) bool {
					switch {
					case wire.KeyIs(key, "delta") && first:
						_ = wire.EachKey(val, func(key, val []byte, _ int) bool {
							switch {
							case wire.KeyIs(key, "content"):
								ci.content = val
							case wire.KeyIs(key, "reasoning_content"):
								ci.reasoning = val
							case wire.KeyIs(key, "tool_calls"):
								ci.toolCall = !wire.IsNull(val) && string(val) != "[]"
							}
							return true
						})
					case wire.KeyIs(key, "text") && first: // a completion's chunk
						ci.content = val
					case wire.KeyIs(key, "finish_reason") && !wire.IsNull(val):
						if !ci.finish {
							ci.finishReason = val
						}
						ci.finish = true
					}
					return true
				})
				first = false
				return true
			})
		case wire.KeyIs(key, "id"):
			ci.id = val
		case wire.KeyIs(key, "model"):
			ci.model = val
		case wire.KeyIs(key, "created"):
			ci.created = val
		case wire.KeyIs(key, "error"):
			ci.failed = true
		case wire.KeyIs(key, "usage") && !wire.IsNull(val):
			ci.usage = val
		}
		return true
	})
	ci.usageOnly = ci.usageOnly && ci.usage != nil
	return ci, err == nil
}
