package nginx

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints/tomlconf"
)

// Config is the nginx room's part of upstreams.toml: the top-level
// output_dir and the [nginx] table (etc/upstreams.toml documents them).
// The file's loader (endpoints/config) starts from DefaultConfig and hands
// the keys to Fields and Check; the zero value is not usable.
type Config struct {
	// OutputDir receives upstream-<tier>.conf and unavailable-<tier>.json;
	// the nginx site includes and reads them.
	OutputDir string
	// Test and Reload are argv (no shell) for "nginx -t" and "nginx -s reload".
	Test, Reload []string
	// Timeout bounds each of them.
	Timeout time.Duration
}

// DefaultConfig is the room's keys with every key left out.
func DefaultConfig() Config {
	return Config{OutputDir: "/etc/nginx/slurm-llm", Test: []string{"nginx", "-t", "-q"},
		Reload: []string{"nginx", "-s", "reload"}, Timeout: 30 * time.Second}
}

// Fields declares the room's keys, for the file's loader to merge into the
// top level of upstreams.toml.
func (c *Config) Fields(d *tomlconf.Decoder) map[string]tomlconf.Field {
	return map[string]tomlconf.Field{
		"output_dir": d.String(&c.OutputDir),
		"nginx": d.TableField(map[string]tomlconf.Field{
			"test":    d.Strings(&c.Test),
			"reload":  d.Strings(&c.Reload),
			"timeout": d.Duration(&c.Timeout),
		}),
	}
}

// Check validates the room's keys; tiers are the configured tier names,
// which must stay apart once made nginx identifiers (NginxName).
func (c *Config) Check(d *tomlconf.Decoder, tiers []string) {
	if c.OutputDir == "" || !filepath.IsAbs(c.OutputDir) {
		d.Invalid(toml.Key{"output_dir"}, "want an absolute path")
	}
	if len(c.Test) == 0 {
		d.Invalid(toml.Key{"nginx", "test"}, "want a non-empty argv")
	}
	if len(c.Reload) == 0 {
		d.Invalid(toml.Key{"nginx", "reload"}, "want a non-empty argv")
	}
	if c.Timeout <= 0 {
		d.Invalid(toml.Key{"nginx", "timeout"}, "want a positive duration")
	}
	seen := map[string]string{}
	for _, name := range slices.Sorted(slices.Values(tiers)) {
		if other, dup := seen[NginxName(name)]; dup {
			d.Invalid(toml.Key{"tiers", name}, "%s and %s have the same nginx name", other, name)
		}
		seen[NginxName(name)] = name
	}
}
