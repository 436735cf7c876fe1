package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// SlotSave is a tier's slot saving as the doctor checks it: the directory
// the drain saves the head's slots into, what a full context takes
// (NeedBytes, 0 when unknown) and the drain's share for the saves.
type SlotSave struct {
	Tier, Dir string
	NeedBytes int64
	Share     time.Duration
}

// WriteProbeBytes is how much the doctor writes (and syncs) to measure a
// slot save directory's write speed.
const WriteProbeBytes = 64 << 20

// measureWrite is Host.WriteSpeed on the real file system: size bytes
// written to a temporary file in dir, synced, timed, removed.
func measureWrite(dir string, size int64) (float64, error) {
	f, err := os.CreateTemp(dir, ".slurm-llm-doctor-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	chunk := make([]byte, 1<<20)
	start := time.Now()
	for left := size; left > 0; left -= int64(len(chunk)) {
		n := min(left, int64(len(chunk)))
		if _, err := f.Write(chunk[:n]); err != nil {
			return 0, fmt.Errorf("write %s: %w", filepath.Base(f.Name()), err)
		}
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("sync: %w", err)
	}
	return float64(size) / time.Since(start).Seconds(), nil
}

// CheckSlotSaveSpeed says whether the directory's measured write speed
// (bytes/s, or the error measuring it) saves a full context of the tier
// within the drain's save share: speed × share ≥ bytes per token × context.
func CheckSlotSaveSpeed(s SlotSave, speed float64, err error) Result {
	c := "slot_save." + s.Tier
	if err != nil {
		return warn(c, fmt.Sprintf("%s: write speed not measured: %v", s.Dir, err),
			"make the directory writable by the job's account on every GPU node (shared storage)")
	}
	can := speed * s.Share.Seconds()
	what := fmt.Sprintf("%s: %.0f MB/s: the drain's %s saves up to %.2f GB", s.Dir, speed/1e6, s.Share, can/1e9)
	switch {
	case s.NeedBytes <= 0:
		return ok(c, what+" (set slot_save_bytes_per_token and -c to check a full context)")
	case can < float64(s.NeedBytes):
		return warn(c, fmt.Sprintf("%s, a full context is %.2f GB: slots past that are not saved (the drain gives up at its deadline)",
			what, float64(s.NeedBytes)/1e9),
			fmt.Sprintf("a faster directory (%.0f MB/s needed), a longer drain.budget, or a smaller context", float64(s.NeedBytes)/s.Share.Seconds()/1e6))
	}
	return ok(c, fmt.Sprintf("%s, a full context is %.2f GB", what, float64(s.NeedBytes)/1e9))
}
