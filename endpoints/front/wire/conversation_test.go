package wire

import (
	"fmt"
	"testing"
)

// TestConversationKey: every turn of a conversation has its key (the messages
// up to the first user message, or a long raw prompt's beginning); another
// opening, another model or no opening has another key or none.
func TestConversationKey(t *testing.T) {
	turn1 := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`
	turn2 := `{"model":"m","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"},` +
		`{"role":"assistant","content":"hi"},{"role":"user","content":"more"}]}`
	other := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"bonjour"}]}`
	k1, k2 := ConversationKey("m", []byte(turn1)), ConversationKey("m", []byte(turn2))
	if k1 == "" || k1 != k2 {
		t.Errorf("two turns of one conversation: %q and %q; want one key", k1, k2)
	}
	if k := ConversationKey("m", []byte(other)); k == "" || k == k1 {
		t.Errorf("another opening: %q; want another key than %q", k, k1)
	}
	if k := ConversationKey("n", []byte(turn1)); k == k1 {
		t.Errorf("another model has the same key")
	}
	long := fmt.Sprintf("%0600d", 7)
	p1 := ConversationKey("m", []byte(`{"prompt":"`+long+`"}`))
	p2 := ConversationKey("m", []byte(`{"prompt":"`+long+` and then some more text"}`))
	if p1 == "" || p1 != p2 {
		t.Errorf("a raw prompt and its continuation: %q and %q; want one key", p1, p2)
	}
	for _, body := range []string{`{"prompt":"short"}`, `{"messages":[{"role":"system","content":"x"}]}`, `{"messages":[]}`, `{}`} {
		if k := ConversationKey("m", []byte(body)); k != "" {
			t.Errorf("ConversationKey(%s) = %q; want none", body, k)
		}
	}
}
