package kvrestore

import (
	"testing"

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
