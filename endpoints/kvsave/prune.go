package kvsave

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Bounds are how long a saved slot is kept and how much the directory may
// hold. Zero values bound nothing.
type Bounds struct {
	// TTL: a saved slot older than this is removed (0: kept until restored
	// or pushed out by MaxBytes).
	TTL time.Duration
	// MaxBytes: the saved slots' total size is kept within this, the oldest
	// removed first (0: no bound).
	MaxBytes int64
}

// saved is one saved slot file as Prune sees it.
type saved struct {
	name string
	size int64
	at   time.Time
}

// Prune removes from dir the saved slots older than b.TTL at now, then the
// oldest until the rest fit in b.MaxBytes, each with its index entry; an
// index entry whose slot file is gone goes too. It returns the names of
// the slot files removed. Only files named by FileName are touched.
func Prune(dir string, now time.Time, b Bounds) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []saved
	present := map[string]bool{}
	var orphans []string
	for _, de := range des {
		name := de.Name()
		switch {
		case strings.HasSuffix(name, slotSuffix) && de.Type().IsRegular():
			info, err := de.Info()
			if err != nil {
				continue
			}
			present[name] = true
			files = append(files, saved{name: name, size: info.Size(), at: info.ModTime()})
		case strings.HasSuffix(name, slotSuffix+indexSuffix):
			orphans = append(orphans, strings.TrimSuffix(name, indexSuffix))
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].at.Before(files[j].at) })
	var total int64
	for _, f := range files {
		total += f.size
	}
	var removed []string
	var errs []error
	for _, f := range files {
		old := b.TTL > 0 && now.Sub(f.at) > b.TTL
		over := b.MaxBytes > 0 && total > b.MaxBytes
		if !old && !over {
			continue
		}
		if err := Remove(dir, f.name); err != nil {
			errs = append(errs, err)
			continue
		}
		total -= f.size
		delete(present, f.name)
		removed = append(removed, f.name)
	}
	for _, o := range orphans {
		if !present[o] {
			if err := os.Remove(filepath.Join(dir, o+indexSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}
