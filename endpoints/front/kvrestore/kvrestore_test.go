package kvrestore

import (
	"testing"

	"slurm-llm/endpoints/front/stream"
	"slurm-llm/endpoints/kvsave"
)

// TestFreeSlot: an empty slot first (its cache serves no one), else an
// idle one, never a busy one.
func TestFreeSlot(t *testing.T) {
	for _, c := range []struct {
		name  string
		slots []kvsave.Slot
		want  int
	}{
		{"none", nil, -1},
		{"all busy", []kvsave.Slot{{ID: 0, IsProcessing: true}, {ID: 1, IsProcessing: true}}, -1},
		{"an idle one", []kvsave.Slot{{ID: 0, IsProcessing: true}, {ID: 1, NPromptTokens: 40}}, 1},
		{"an empty one before an idle one", []kvsave.Slot{{ID: 0, NPromptTokens: 40}, {ID: 1, IsProcessing: true}, {ID: 2}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := freeSlot(c.slots); got != c.want {
				t.Errorf("freeSlot = %d, want %d", got, c.want)
			}
		})
	}
}

// A /completion cut twice: its second head got the prompt with the text
// the client had at the first cut, and its drain keyed the slot by that
// (the first KeyBytes of it): the second continuation looks it up so, and
// the first by the prompt alone.
func TestRawConversationKeyAfterAContinuation(t *testing.T) {
	body := []byte(`{"prompt":"count ","stream":true}`)
	key, err := conversationKey(t.Context(), nil, "", nil, stream.Raw, body, "")
	if err != nil || key != kvsave.Key("count ") {
		t.Errorf("first cut: key %q %v, want the prompt's", key, err)
	}
	key, err = conversationKey(t.Context(), nil, "", nil, stream.Raw, body, "t0 t1 ")
	if err != nil || key != kvsave.Key("count t0 t1 ") {
		t.Errorf("second cut: key %q %v, want the continuation's prompt's", key, err)
	}
}
