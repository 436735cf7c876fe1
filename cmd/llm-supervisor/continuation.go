package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/keeper"
	"slurm-llm/endpoints/tiers/continuity"
	"slurm-llm/supervisor/tier"
)

// checkContinuation is check-config's look at this tier's drain from the
// front door's side (issue 27): a stream still running at the drain's
// in-flight deadline is cut there, and the front door continues it only
// if the tier can be back within its hold. check-config knows the drain;
// the holds are in the controller's upstreams.toml and the release in the
// keeper's config, read when found (--upstreams, else beside the tier's
// config; the keeper's beside it, else the one upstreams.toml names). It returns a note saying what was checked, and the warnings of
// continuity.Check; the front door's start warns too, with the
// measured start-to-ready but without the drain.
func checkContinuation(cfg *tier.Config, opts *checkConfigOptions) (string, []string) {
	path, given := opts.upstreams, opts.upstreams != ""
	if !given {
		path = filepath.Join(filepath.Dir(opts.path), "upstreams.toml")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "the front door's holds not checked against this drain: no upstreams.toml beside it (--upstreams FILE)", nil
		}
	}
	uc, err := config.LoadSettings(path)
	if err != nil {
		return fmt.Sprintf("the front door's holds not checked against this drain: %v", err), nil
	}
	ft, ok := uc.Front.Tiers[cfg.Tier]
	if !ok {
		return fmt.Sprintf("the front door's holds not checked: tier %s is not in %s's [tiers]", cfg.Tier, path), nil
	}
	kc, kpath, kerr := loadKeeperBeside(uc.KeeperConfig, opts.path)
	split := tier.Split(cfg.Kind, cfg.Timeouts, cfg.Drain, tier.ShimMargin)
	f := continuity.Facts{Tier: cfg.Tier, Front: uc.Front.Hold(cfg.Tier), HoldUnknown: uc.Front.HoldUnknown,
		InFlight: split.InFlight, Stop: split.Stop()}
	f.Release, f.ReleaseWithin, f.NoRelease = continuity.KeeperRelease(kc, cfg.Tier)
	if kerr != nil {
		f.NoRelease = kerr.Error()
	}
	note := fmt.Sprintf("a stream still running %s after the stop notice is cut; the front door (%s) holds it "+
		"for [front.tiers.%s] hold = %s while the tier comes back: the ordered stop (up to %s), ",
		split.InFlight, path, cfg.Tier, ft.Hold, split.Stop())
	if f.Release {
		left := ft.Hold - split.Stop() - f.ReleaseWithin
		note += fmt.Sprintf("the keeper's release (%s, %s) leave %s for the start and the load", f.ReleaseWithin, kpath, left)
	} else {
		note += fmt.Sprintf("Slurm's requeue hold (%s: %s)", continuity.SlurmRequeueHold, f.NoRelease)
	}
	return note, continuity.Check(f)
}

// loadKeeperBeside loads keeper.toml beside the tier's config (the set of
// files being checked: /etc/slurm-llm/, a checkout of etc/, a staging
// directory), or else the keeper config upstreams.toml names; nil and no
// error when neither exists.
func loadKeeperBeside(named, tierPath string) (*keeper.Config, string, error) {
	for _, p := range []string{filepath.Join(filepath.Dir(tierPath), "keeper.toml"), named} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			continue
		}
		kc, err := keeper.Load(p)
		if err != nil {
			return nil, p, err
		}
		return &kc, p, nil
	}
	return nil, "", nil
}
