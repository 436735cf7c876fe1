package stream

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A token held back (its event brings "" while a stop word is matched)
// is not the client's: the continuation's ids stop before it, and a head
// that sends no ids, or an event whose ids fall short of its count, leaves
// them unknown.
func TestRawIDsFollowWhatTheClientHas(t *testing.T) {
	var r rawIDs
	r.note([]byte(`[7]`), []byte(`1`), []byte(`"a"`))
	r.note([]byte(`[8]`), []byte(`2`), []byte(`""`))
	if !r.exact() || !cmp.Equal(r.sent, []int64{7}) {
		t.Errorf("after a held token: exact %v, sent %v; want [7]", r.exact(), r.sent)
	}
	p, ok := r.prompt(json.RawMessage(`[1,"x"]`))
	if !ok || string(p) != `[1,"x",7]` {
		t.Errorf("prompt of a mixed prompt: %s %v", p, ok)
	}
	if _, ok := r.prompt(json.RawMessage(`["x","y"]`)); ok {
		t.Error("several prompts taken for one")
	}
	r.note([]byte(`[9]`), []byte(`3`), []byte(`"bc"`))
	if !cmp.Equal(r.sent, []int64{7, 8, 9}) {
		t.Errorf("sent %v once the held text came, want [7 8 9]", r.sent)
	}
	r.switched()
	r.note([]byte(`[10]`), []byte(`1`), []byte(`"d"`))
	if !r.exact() || len(r.sent) != 4 {
		t.Errorf("a continuation's first token: exact %v, sent %v", r.exact(), r.sent)
	}
	r.note([]byte(`[12]`), []byte(`3`), []byte(`"ef"`))
	if r.exact() {
		t.Error("an event naming one of two tokens left the ids exact")
	}
	var none rawIDs
	none.note(nil, []byte(`1`), []byte(`"a"`))
	if none.exact() {
		t.Error("events without ids left them exact")
	}
	if (&rawIDs{}).exact() {
		t.Error("no event taken, yet exact")
	}
}
