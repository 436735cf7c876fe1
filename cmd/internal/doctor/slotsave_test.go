package doctor

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestCheckSlotSaveSpeed(t *testing.T) {
	share := 8 * time.Second
	tests := []struct {
		name  string
		need  int64
		speed float64
		err   error
		want  Status
	}{
		{name: "fast enough for a full context", need: 3e9, speed: 400e6, want: OK},
		{name: "too slow for a full context", need: 3e9, speed: 100e6, want: Warn},
		{name: "a full context unknown: the speed said", need: 0, speed: 10e6, want: OK},
		{name: "not measured", need: 3e9, err: errors.New("permission denied"), want: Warn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := CheckSlotSaveSpeed(SlotSave{Tier: "reasoning", Dir: "/kv", NeedBytes: tt.need, Share: share}, tt.speed, tt.err)
			if r.Status != tt.want || r.Check != "slot_save.reasoning" {
				t.Errorf("got %+v, want status %s", r, tt.want)
			}
			if r.Status != OK && r.Fix == "" {
				t.Errorf("a miss without its fix: %+v", r)
			}
		})
	}
}

func TestMeasureWrite(t *testing.T) {
	dir := t.TempDir()
	speed, err := measureWrite(dir, 1<<20)
	if err != nil || speed <= 0 {
		t.Fatalf("measureWrite = %v, %v", speed, err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("left %d files behind", len(des))
	}
	if _, err := measureWrite(dir+"/missing", 1<<20); err == nil {
		t.Errorf("a missing directory measured")
	}
}
