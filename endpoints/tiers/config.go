// Package tiers is the controller's core: one pass over the endpoint
// directory and the scheduler's answers (scan.go, scheduler.go,
// tierask.go, fences.go) makes a Report: what is live, the decisions on
// each file, and each tier's view (tierview.go, views.go: routed or why
// not, its job and its preemptor, when it is expected back), with each
// tier's memory kept across restarts (tiermem.go, continuity.go). The pass
// hands the report to its consumers (consumer.go): the watcher's nginx
// (endpoints/nginx) and the front door (endpoints/front) take it the same
// way, and this package imports neither. Watch runs passes on file events,
// hints and sweeps; the watcher's passes also keep the availability record
// (record.go, report.go) and remove the endpoint files of jobs gone
// (stale.go). It reads its own keys of upstreams.toml (Config: the top
// level, [tiers], [scheduler], [metrics], [outage], [record], [stale];
// endpoints/config loads the file) and follows the keeper's file through
// keeper.Follower. It reads jobs' files and asks Slurm about jobs; it
// never submits, releases, cancels or signals a job (endpoints/keeper
// does), and never runs nginx.
package tiers

import (
	"maps"
	"net"
	"net/netip"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tomlconf"
)

// Config is the watcher's part of upstreams.toml: the top-level keys and
// their tables but [front] (see etc/upstreams.toml for every key with its
// meaning). The file's loader (endpoints/config) fills the defaults
// (DefaultConfig) and hands the tables to Fields and Check; the zero value
// is not usable.
type Config struct {
	// EndpointDir is the shared directory jobs publish endpoint files into.
	EndpointDir string
	// LockFile serialises passes of every llm-upstreams process (flock).
	LockFile string
	// AllowedOwners are user names or numeric uids whose endpoint files are
	// read. Empty only with AllowAnyOwner.
	AllowedOwners []string
	// AllowAnyOwner is the explicit opt-out: files of any owner are read.
	AllowAnyOwner bool
	// AllowedNetworks are CIDR prefixes an endpoint's address (after name
	// resolution) must fall in. Empty only with AllowAnyNetwork.
	AllowedNetworks []string
	// AllowAnyNetwork is the explicit opt-out: any address is routed, the
	// controller's own loopback services included.
	AllowAnyNetwork bool
	// MaxFileSize is the largest endpoint file read, in bytes.
	MaxFileSize int64
	// MaxFiles caps the endpoint files read per pass (in name order); the
	// rest are rejected unread and counted: a directory flooded with junk
	// costs a bounded pass.
	MaxFiles int
	// ClockSkew is how far in the future a heartbeat may be before its
	// file is not trusted (not routed, fences nothing).
	ClockSkew time.Duration
	// SweepInterval is how often watch mode re-checks leases and the scheduler.
	SweepInterval time.Duration
	// Coalesce is how long watch mode waits after a file event or a hint
	// for more; passes so triggered run at most once per Coalesce.
	Coalesce time.Duration
	// HintListen is the UDP address ("10.77.0.1:9466") where watch takes
	// hints (see SendHint); "" means no listener.
	HintListen string
	// ResolveTimeout bounds the lookup of a host name in an endpoint file.
	ResolveTimeout time.Duration
	// LockTimeout bounds the wait for another process's pass.
	LockTimeout time.Duration
	// Tiers maps tier name to its settings; each gets a file even when empty.
	Tiers map[string]TierConfig
	// Scheduler says whether and how Slurm is asked about jobs.
	Scheduler SchedulerConfig
	// Metrics says where Prometheus figures go.
	Metrics MetricsConfig
	// KeeperConfig is the keeper config in use on this controller
	// (llm-upstreams keep --config), whose tiers status shows; "" for none.
	KeeperConfig string
	// StateDir keeps what watch learns across restarts: each tier's
	// measured start-to-routed times and last state (tiers.json) and the
	// availability record (availability.jsonl). "" (the default) keeps
	// nothing: estimates wait for a measurement in this process, and
	// nothing is recorded.
	StateDir string
	// Outage says how a tier with nothing live is estimated and answered.
	Outage OutageConfig
	// Record bounds the availability record.
	Record RecordConfig
	// Stale says whether and when endpoint files of jobs gone are removed.
	Stale StaleConfig

	// AllowedUIDs is AllowedOwners resolved by Check.
	AllowedUIDs []uint32
	// AllowedPrefixes is AllowedNetworks parsed by Check.
	AllowedPrefixes []netip.Prefix
	// Path is the file the loader read.
	Path string
}

// TierConfig is one tier's settings.
type TierConfig struct {
	// Backup names the tier whose endpoints serve this one when it has none.
	Backup string
	// JobName is the Slurm job name the tier's jobs carry (the keeper's
	// job_name); a file whose job has another name is not routed. Default
	// "llm-<tier>".
	JobName string
	// ExtraJobName is the job name of the tier's extra replicas (the
	// keeper's [tiers.NAME.replicas] extra_job_name); their files are
	// routed too. Default "<job_name>-extra".
	ExtraJobName string
}

// IsTierJob reports whether a job named name is one of the tier's: its
// kept job(s) or an extra replica.
func (t TierConfig) IsTierJob(name string) bool { return name == t.JobName || name == t.ExtraJobName }

// RecordConfig bounds the availability record.
type RecordConfig struct {
	// MaxSize is the most bytes the record keeps, across its current file
	// and the one rotated before it.
	MaxSize int64
}

// StaleConfig says how endpoint files whose job is gone are cleaned up.
type StaleConfig struct {
	// Remove turns the cleanup on (watch only).
	Remove bool
	// Grace is how long after its lease ended a file of a job the
	// scheduler says is gone is kept.
	Grace time.Duration
	// Interval is how often watch looks for such files (one squeue call).
	Interval time.Duration
}

// SchedulerConfig says whether endpoints are checked against Slurm.
type SchedulerConfig struct {
	// Check enables the squeue call for the jobs of ready entries.
	Check bool
	// Timeout bounds that call; on timeout nothing is dropped.
	Timeout time.Duration
	// MaxAge is how long an answer is reused while it covers every
	// candidate job; a job not asked about yet is asked about at once.
	MaxAge time.Duration
	// BackoffMax caps the wait between calls while the scheduler does not
	// answer (MaxAge, doubled per failure in a row).
	BackoffMax time.Duration
}

// MetricsConfig says where metrics go; both empty means nowhere.
type MetricsConfig struct {
	// Listen is an HTTP address serving /metrics in watch mode ("127.0.0.1:9465").
	Listen string
	// Textfile is a node_exporter textfile written after each pass.
	Textfile string
}

// Defaults used by Load for keys left out.
var defaultConfig = Config{
	LockFile:       "/run/llm-upstreams/lock",
	MaxFileSize:    endpoints.DefaultMaxFileSize,
	MaxFiles:       DefaultMaxFiles,
	ClockSkew:      endpoints.DefaultClockSkew,
	SweepInterval:  time.Second,
	Coalesce:       100 * time.Millisecond,
	ResolveTimeout: 2 * time.Second,
	LockTimeout:    60 * time.Second,
	Scheduler: SchedulerConfig{Check: true, Timeout: 10 * time.Second, MaxAge: 5 * time.Second,
		BackoffMax: 60 * time.Second},
	KeeperConfig: DefaultKeeperConfig,
	Outage:       OutageConfig{RetryAfter: 30 * time.Second, RetryAfterMax: time.Hour, ReadySamples: 20},
	Record:       RecordConfig{MaxSize: 8 << 20},
	Stale:        StaleConfig{Remove: true, Grace: 10 * time.Minute, Interval: time.Minute},
}

// DefaultKeeperConfig is where the keeper's config is installed.
const DefaultKeeperConfig = "/etc/slurm-llm/keeper.toml"

// DefaultConfig is the watcher's keys with every key left out, as the
// file's loader (endpoints/config) starts from; not usable as it is (no
// endpoint_dir, no tiers).
func DefaultConfig() Config {
	cfg := defaultConfig
	cfg.Tiers = map[string]TierConfig{}
	return cfg
}

// Fields declares the watcher's keys of upstreams.toml (etc/upstreams.toml
// documents them): the top level and its tables, all but [front] (the
// front door's, package front), for the file's loader to take in.
func (c *Config) Fields(d *tomlconf.Decoder) map[string]tomlconf.Field {
	return map[string]tomlconf.Field{
		"endpoint_dir":      d.String(&c.EndpointDir),
		"lock_file":         d.String(&c.LockFile),
		"lock_timeout":      d.Duration(&c.LockTimeout),
		"allowed_owners":    d.Strings(&c.AllowedOwners),
		"allowed_networks":  d.Strings(&c.AllowedNetworks),
		"allow_any_owner":   d.Bool(&c.AllowAnyOwner),
		"allow_any_network": d.Bool(&c.AllowAnyNetwork),
		"max_file_size":     d.Int64(&c.MaxFileSize),
		"max_files":         d.Int(&c.MaxFiles),
		"clock_skew":        d.Duration(&c.ClockSkew),
		"sweep_interval":    d.Duration(&c.SweepInterval),
		"coalesce":          d.Duration(&c.Coalesce),
		"hint_listen":       d.String(&c.HintListen),
		"resolve_timeout":   d.Duration(&c.ResolveTimeout),
		"keeper_config":     d.String(&c.KeeperConfig),
		"state_dir":         d.String(&c.StateDir),
		"tiers": d.Each(func(name string) tomlconf.Field {
			return func(key toml.Key, v any) {
				tc := TierConfig{JobName: "llm-" + name}
				d.Table(key, v, map[string]tomlconf.Field{"backup": d.String(&tc.Backup), "job_name": d.String(&tc.JobName),
					"extra_job_name": d.String(&tc.ExtraJobName)}, nil)
				if tc.ExtraJobName == "" {
					tc.ExtraJobName = tc.JobName + "-extra"
				}
				c.Tiers[name] = tc
			}
		}),
		"scheduler": d.TableField(map[string]tomlconf.Field{
			"check":       d.Bool(&c.Scheduler.Check),
			"timeout":     d.Duration(&c.Scheduler.Timeout),
			"max_age":     d.Duration(&c.Scheduler.MaxAge),
			"backoff_max": d.Duration(&c.Scheduler.BackoffMax),
		}),
		"metrics": d.TableField(map[string]tomlconf.Field{
			"listen":   d.String(&c.Metrics.Listen),
			"textfile": d.String(&c.Metrics.Textfile),
		}),
		"outage": d.TableField(map[string]tomlconf.Field{
			"retry_after":     d.Duration(&c.Outage.RetryAfter),
			"retry_after_max": d.Duration(&c.Outage.RetryAfterMax),
			"ready_samples":   d.Int(&c.Outage.ReadySamples),
		}),
		"record": d.TableField(map[string]tomlconf.Field{
			"max_size": d.Int64(&c.Record.MaxSize),
		}),
		"stale": d.TableField(map[string]tomlconf.Field{
			"remove":   d.Bool(&c.Stale.Remove),
			"grace":    d.Duration(&c.Stale.Grace),
			"interval": d.Duration(&c.Stale.Interval),
		}),
	}
}

// Check validates what decoding could not, and resolves the owners (with
// lookup: user.Lookup, or a stand-in where the controller's accounts are
// unknown) and the networks.
func (c *Config) Check(d *tomlconf.Decoder, lookup func(string) (*user.User, error)) {
	for key, dir := range map[string]string{"endpoint_dir": c.EndpointDir, "lock_file": c.LockFile} {
		if dir == "" || !filepath.IsAbs(dir) {
			d.Invalid(toml.Key{key}, "want an absolute path")
		}
	}
	if c.KeeperConfig != "" && !filepath.IsAbs(c.KeeperConfig) {
		d.Invalid(toml.Key{"keeper_config"}, `want an absolute path, or "" for no keeper`)
	}
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		d.Invalid(toml.Key{"state_dir"}, `want an absolute path, or "" to keep nothing`)
	}
	if c.Outage.RetryAfter < time.Second || c.Outage.RetryAfterMax < c.Outage.RetryAfter {
		d.Invalid(toml.Key{"outage", "retry_after"}, "want at least 1s, and retry_after_max at least as long")
	}
	if c.Outage.ReadySamples < 1 || c.Outage.ReadySamples > 1000 {
		d.Invalid(toml.Key{"outage", "ready_samples"}, "want 1 to 1000")
	}
	if c.Record.MaxSize < 64<<10 {
		d.Invalid(toml.Key{"record", "max_size"}, "want at least 65536 bytes")
	}
	if c.HintListen != "" {
		if _, port, err := net.SplitHostPort(c.HintListen); err != nil {
			d.Invalid(toml.Key{"hint_listen"}, "want host:port or \"\" (%v)", err)
		} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			d.Invalid(toml.Key{"hint_listen"}, "want a port between 1 and 65535 (got %q)", port)
		}
	}
	for key, v := range map[string]time.Duration{"sweep_interval": c.SweepInterval, "coalesce": c.Coalesce,
		"resolve_timeout": c.ResolveTimeout, "lock_timeout": c.LockTimeout,
		"scheduler.timeout": c.Scheduler.Timeout, "scheduler.max_age": c.Scheduler.MaxAge,
		"scheduler.backoff_max": c.Scheduler.BackoffMax, "stale.grace": c.Stale.Grace, "stale.interval": c.Stale.Interval,
		"clock_skew": c.ClockSkew} {
		if v <= 0 {
			d.Invalid(strings.Split(key, "."), "want a positive duration")
		}
	}
	if c.MaxFileSize <= 0 {
		d.Invalid(toml.Key{"max_file_size"}, "want a positive size")
	}
	if c.MaxFiles <= 0 {
		d.Invalid(toml.Key{"max_files"}, "want a positive number of files")
	}
	c.checkTiers(d)
	c.checkAllowLists(d)
	c.resolveOwners(d, lookup)
	c.parseNetworks(d)
}

// checkAllowLists refuses the open default: whoever can write the shared
// endpoint directory could otherwise route the site's users to a server of
// their choice. An empty list is an error unless its opt-out says so, and
// an opt-out beside a list is a contradiction.
func (c *Config) checkAllowLists(d *tomlconf.Decoder) {
	for _, l := range []struct {
		list, anyKey, what string
		n                  int
		any                bool
	}{
		{"allowed_owners", "allow_any_owner", "the accounts whose endpoint files are routed (the tier jobs' account)",
			len(c.AllowedOwners), c.AllowAnyOwner},
		{"allowed_networks", "allow_any_network", "the networks (CIDR) endpoint addresses may be in (the cluster's)",
			len(c.AllowedNetworks), c.AllowAnyNetwork},
	} {
		switch {
		case l.n == 0 && !l.any:
			d.Invalid(toml.Key{l.list}, "empty: list %s, or set %s = true to accept any", l.what, l.anyKey)
		case l.n > 0 && l.any:
			d.Invalid(toml.Key{l.anyKey}, "true but %s lists %d; keep one of the two", l.list, l.n)
		}
	}
}

// checkTiers checks tier names and backups (the nginx room checks that
// the names stay apart as nginx identifiers).
func (c *Config) checkTiers(d *tomlconf.Decoder) {
	if len(c.Tiers) == 0 {
		d.Invalid(toml.Key{"tiers"}, "want at least one [tiers.<name>] table")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Tiers)) {
		key := toml.Key{"tiers", name}
		if err := endpoints.CheckTier(name); err != nil {
			d.Invalid(key, "%v", err)
			continue
		}
		if j := c.Tiers[name].JobName; j == "" || strings.ContainsAny(j, ", \t\n\"'") {
			d.Invalid(append(key, "job_name"), "want a name without commas, quotes or white space")
		}
		if j := c.Tiers[name].ExtraJobName; j == c.Tiers[name].JobName || strings.ContainsAny(j, ", \t\n\"'") {
			d.Invalid(append(key, "extra_job_name"), "want a name without commas, quotes or white space, other than job_name")
		}
		if b := c.Tiers[name].Backup; b != "" {
			if _, ok := c.Tiers[b]; !ok || b == name {
				d.Invalid(append(key, "backup"), "%q is not another configured tier", b)
			}
		}
	}
}

// parseNetworks fills AllowedPrefixes from AllowedNetworks.
func (c *Config) parseNetworks(d *tomlconf.Decoder) {
	for i, n := range c.AllowedNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			d.Invalid(toml.Key{"allowed_networks"}, "element %d: %v", i, err)
			continue
		}
		c.AllowedPrefixes = append(c.AllowedPrefixes, p.Masked())
	}
}

// TierSpec is a configured tier as a pass reads it: its name, the tier
// whose endpoints serve it when it has none (empty: no backup), and the
// Retry-After (seconds) its 503 sends while nothing is known of its return.
type TierSpec struct {
	Name       string
	Backup     string
	RetryAfter int
}

// TierSpecs returns the configured tiers sorted by name.
func (c *Config) TierSpecs() []TierSpec {
	var out []TierSpec
	for _, name := range slices.Sorted(maps.Keys(c.Tiers)) {
		out = append(out, TierSpec{Name: name, Backup: c.Tiers[name].Backup,
			RetryAfter: int(c.Outage.RetryAfter / time.Second)})
	}
	return out
}

// resolveOwners fills AllowedUIDs from AllowedOwners: user names and
// numeric uids.
func (c *Config) resolveOwners(d *tomlconf.Decoder, lookup func(string) (*user.User, error)) {
	for i, o := range c.AllowedOwners {
		if n, err := strconv.ParseUint(o, 10, 32); err == nil {
			c.AllowedUIDs = append(c.AllowedUIDs, uint32(n))
			continue
		}
		u, err := lookup(o)
		if err != nil {
			d.Invalid(toml.Key{"allowed_owners"}, "element %d: %v", i, err)
			continue
		}
		n, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			d.Invalid(toml.Key{"allowed_owners"}, "element %d: user %s has uid %q: %v", i, o, u.Uid, err)
			continue
		}
		c.AllowedUIDs = append(c.AllowedUIDs, uint32(n))
	}
}
