package nginx

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"slurm-llm/endpoints/fsutil"
)

// WritePlaceholders writes, into the config's output directory, the
// upstream file of every configured tier that has none yet, as a pass
// with nothing live renders it (the tier answers 503 "no live endpoint").
// It is what a fresh install needs before the nginx site is loaded: the
// site includes each tier's file by name, and nginx -t fails on a missing
// one (on RHEL the package puts the site in conf.d/, which nginx loads at
// its next reload). An existing file is never touched, so a running
// watcher's routing is kept; nothing runs nginx. It returns the paths it
// wrote. tiers are the configured tiers; source, the endpoint directory,
// is named in the files' header.
func WritePlaceholders(cfg Config, tiers []TierSpec, source, generator string) ([]string, error) {
	if err := os.MkdirAll(cfg.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("make output_dir: %w", err)
	}
	ups := Render(tiers, nil, RenderMeta{Generator: generator, Source: source})
	var wrote []string
	for _, u := range ups {
		path := filepath.Join(cfg.OutputDir, u.File)
		_, err := os.Lstat(path)
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return wrote, fmt.Errorf("placeholder %s: %w", path, err)
		}
		if err := fsutil.WriteFile(path, u.Bytes, 0o644); err != nil {
			return wrote, fmt.Errorf("placeholder %s: %w", path, err)
		}
		wrote = append(wrote, path)
	}
	return wrote, nil
}
