// Package config loads upstreams.toml, the controller's one file, and
// hands each table to the room that owns it: the watcher's keys (the top
// level, [tiers], [scheduler], [metrics], [outage], [record],
// [stale]) to package tiers, output_dir and [nginx] to package nginx,
// [front] to package front, whose
// [front.auth], [front.usage], [front.fair_share] and [front.limits] are
// package access's. Each room declares and checks its own keys; here they
// are put together under the loader every config shares (tomlconf), so an
// unknown key anywhere is an error naming the file and line, and every
// problem is reported. The keeper's file (keeper_config) is the keeper's:
// package keeper loads it.
package config

import (
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"

	"slurm-llm/endpoints/front"
	"slurm-llm/endpoints/nginx"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/endpoints/tomlconf"
)

// Watcher is the watcher's part of the file (tiers.Config); embedded
// in Config under this name, so that its keys read cfg.EndpointDir.
type Watcher = tiers.Config

// Config is upstreams.toml as its rooms read it. Load fills the defaults;
// the zero value is not usable.
type Config struct {
	Watcher
	// Nginx is output_dir and [nginx]: the nginx room's keys.
	Nginx nginx.Config
	// Front is [front]: the front door's settings (llm-upstreams front),
	// access's tables among them.
	Front front.Config
}

// Load reads and validates upstreams.toml: unknown keys are errors naming
// the file and line, so a typo never silently falls back to a default,
// and durations are strings ("5s"), never bare numbers.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, b)
}

// Parse is Load on bytes already read; path is used in messages. Every
// problem is reported, each as "FILE:LINE: KEY: reason".
func Parse(path string, b []byte) (Config, error) { return parse(path, b, user.Lookup) }

// LoadSettings is Load for a tool that reads the file's settings on a
// machine that need not have the controller's accounts (llm-supervisor
// check-config on a login node, or in a checkout of etc/): an account of
// allowed_owners unknown there is not an error; it stands for uid
// 4294967295 ((uid_t)-1, which owns no file). Never route with it.
func LoadSettings(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	return parse(path, b, func(name string) (*user.User, error) {
		if u, err := user.Lookup(name); err == nil {
			return u, nil
		}
		return &user.User{Username: name, Uid: "4294967295"}, nil
	})
}

// parse is Parse with the user lookup given (tests name accounts that
// the machine running them lacks).
func parse(path string, b []byte, lookup func(string) (*user.User, error)) (Config, error) {
	cfg := Config{Watcher: tiers.DefaultConfig(), Nginx: nginx.DefaultConfig(), Front: front.DefaultConfig()}
	cfg.Path = path
	decode := func(d *tomlconf.Decoder) {
		fields := cfg.Watcher.Fields(d)
		maps.Copy(fields, cfg.Nginx.Fields(d))
		fields["front"] = cfg.Front.Field(d)
		d.Root(fields)
	}
	check := func(d *tomlconf.Decoder) {
		cfg.Watcher.Check(d, lookup)
		cfg.Nginx.Check(d, slices.Sorted(maps.Keys(cfg.Tiers)))
		cfg.Front.Check(d, slices.Sorted(maps.Keys(cfg.Tiers)), cfg.StateDir)
	}
	if err := tomlconf.Decode(path, b, decode, check); err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	return cfg, nil
}
