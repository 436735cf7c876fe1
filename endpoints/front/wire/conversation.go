package wire

import (
	"crypto/sha256"
	"encoding/hex"
)

// keyPromptBytes is how much of a raw prompt keys its conversation.
const keyPromptBytes = 512

// ConversationKey is the key of the conversation body belongs to, for
// model; "" when it has none (no messages, no prompt long enough). A
// conversation is known by its beginning, which every turn repeats: a chat
// request's messages up to and including the first user message (the
// system prompt and the question that opened it), a raw prompt's first
// 512 bytes (a prompt shorter than that is not keyed: it is no
// conversation worth a head). Two conversations that open alike have
// one key.
func ConversationKey(model string, body []byte) string {
	var messages, prompt []byte
	_ = EachKey(body, func(key, val []byte, _ int) bool {
		switch {
		case KeyIs(key, "messages"):
			messages = val
		case KeyIs(key, "prompt"):
			prompt = val
		}
		return true
	})
	h := sha256.New()
	h.Write([]byte(model))
	h.Write([]byte{0})
	switch {
	case len(messages) > 0 && messages[0] == '[':
		n, opened := 0, false
		EachElem(messages, func(m []byte) bool {
			h.Write(m)
			n++
			_ = EachKey(m, func(key, val []byte, _ int) bool {
				if KeyIs(key, "role") {
					role, _ := StringValue(val)
					opened = role == "user"
					return false
				}
				return true
			})
			return !opened
		})
		if n == 0 || !opened {
			return ""
		}
	case len(prompt) > 0 && prompt[0] == '"':
		text, ok := StringValue(prompt)
		if !ok || len(text) < keyPromptBytes {
			return ""
		}
		h.Write([]byte(text[:keyPromptBytes]))
	default:
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
