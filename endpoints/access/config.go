package access

import (
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/BurntSushi/toml"

	"slurm-llm/endpoints/tomlconf"
)

// Config is access's part of upstreams.toml: [front.auth], [front.usage],
// [front.fair_share] and [front.limits] (etc/README.md documents every
// key). Access reads it itself (Fields, Check); the file's loader
// (endpoints/config) hands it the tables, the tier names and the state
// directory. DefaultConfig gives the defaults; the zero value is not
// usable.
type Config struct {
	Auth      AuthConfig
	Usage     UsageConfig
	FairShare FairShareConfig
	Limits    LimitsConfig
}

// AuthConfig is [front.auth]: who sends a request (issue 28).
type AuthConfig struct {
	// Mode is "off" (nobody is identified), "identify" (a key or a
	// trusted Tailscale identity names the user, others pass as
	// anonymous) or "required" (401 without one).
	Mode string
	// TrustedProxies are the peers (addresses or prefixes) whose
	// Tailscale-User-Login is believed: tailscale serve on this host.
	TrustedProxies []string
	// TrustedPrefixes is TrustedProxies parsed by Load.
	TrustedPrefixes []netip.Prefix
	// TrustedProxyUsers are the accounts whose connections' identity
	// headers are believed (tailscaled runs as root): the owner of the
	// peer's socket, read from the kernel's socket table, so that another
	// user with a shell on the controller who connects to 127.0.0.1 is not
	// believed as any login. [] checks no owner (the address alone, as
	// before; also where the table cannot be read: not Linux).
	TrustedProxyUsers []string
	// TailscaleUsers maps a Tailscale login to the cluster user it is.
	TailscaleUsers map[string]string
	// AdminGroup's members (and root) list and revoke anyone's keys; ""
	// means root only.
	AdminGroup string
	// KeysFile keeps the issued keys' hashes; default
	// <state_dir>/keys.json, "" (no state_dir) issues none.
	KeysFile string
	// StaticKeysFile holds service accounts' keys ("USER ACCOUNT KEY"
	// lines; refused when others can read it); "" for none.
	StaticKeysFile string
	// KeyTTL is an issued key's life (and the longest a user may ask).
	KeyTTL time.Duration
	// KeyRate and KeyBurst bound each user's requests to the key endpoint
	// (per second, and at once), counted once unmunge has said who it is.
	KeyRate  float64
	KeyBurst int
	// SlurmAccounts: a key's account is the user's Slurm account
	// (sacctmgr, kept AccountsTTL); false where Slurm has no accounting
	// database (keys then have no account).
	SlurmAccounts bool
	AccountsTTL   time.Duration
}

// UsageConfig is [front.usage]: every request's use, kept in SQLite.
type UsageConfig struct {
	// Database is the usage database; default <state_dir>/usage.db, ""
	// (no state_dir) records nothing (the metrics still count).
	Database string
	// Retention is how long records are kept; 0 for ever.
	Retention time.Duration
	// Batch records go in one transaction, at most Flush after the first;
	// Queue bounds those waiting (past it they are dropped and counted).
	Batch int
	Flush time.Duration
	Queue int
	// UserLabel adds a user label to the token and request counters.
	UserLabel bool
}

// FairShareConfig is [front.fair_share]: who goes next when a tier's
// heads are full.
type FairShareConfig struct {
	// Enabled: waiting requests go out by fair share across users;
	// false: in arrival order.
	Enabled bool
	// Weights is "equal" or "sshare" (the users' Slurm fair-share
	// factors, read every SshareTTL).
	Weights   string
	SshareTTL time.Duration
	// HalfLife is how fast head time served is forgotten.
	HalfLife time.Duration
}

// Limit is one user's limits on a tier; 0 is no limit.
type Limit struct {
	InFlight          int
	RequestsPerMinute int
	TokensPerMinute   int
}

// LimitsConfig is [front.limits]: per-user limits, the same for every
// tier (Default) unless [front.limits.tiers.NAME] says otherwise.
type LimitsConfig struct {
	Default Limit
	Tiers   map[string]Limit
}

// The access keys' defaults (see etc/README.md).
var (
	defaultAuth = AuthConfig{Mode: "identify", TrustedProxies: []string{"127.0.0.1", "::1"}, TrustedProxyUsers: []string{"root"},
		KeyTTL: 90 * 24 * time.Hour, KeyRate: 1, KeyBurst: 5, SlurmAccounts: true, AccountsTTL: 10 * time.Minute}
	defaultUsage     = UsageConfig{Retention: 400 * 24 * time.Hour, Batch: 256, Flush: time.Second, Queue: 4096}
	defaultFairShare = FairShareConfig{Enabled: true, Weights: "equal", SshareTTL: 5 * time.Minute, HalfLife: 10 * time.Minute}
)

// DefaultConfig is access's tables with every key left out.
func DefaultConfig() Config {
	c := Config{Auth: defaultAuth, Usage: defaultUsage, FairShare: defaultFairShare,
		Limits: LimitsConfig{Tiers: map[string]Limit{}}}
	c.Auth.TrustedProxies = slices.Clone(defaultAuth.TrustedProxies)
	c.Auth.TrustedProxyUsers = slices.Clone(defaultAuth.TrustedProxyUsers)
	return c
}

// Fields declares [front.auth], [front.usage], [front.fair_share] and
// [front.limits]: the keys of the [front] table that are access's, for the
// front door's table (front.Config.Field) to take in.
func (c *Config) Fields(d *tomlconf.Decoder) map[string]tomlconf.Field {
	a, u, fs, l := &c.Auth, &c.Usage, &c.FairShare, &c.Limits
	limit := func(dst *Limit) map[string]tomlconf.Field {
		return map[string]tomlconf.Field{"in_flight": d.Int(&dst.InFlight),
			"requests_per_minute": d.Int(&dst.RequestsPerMinute), "tokens_per_minute": d.Int(&dst.TokensPerMinute)}
	}
	limits := limit(&l.Default)
	limits["tiers"] = d.Each(func(name string) tomlconf.Field {
		return func(key toml.Key, v any) {
			var lim Limit // keys left out take the default limits' (checkAccess)
			d.Table(key, v, limit(&lim), nil)
			l.Tiers[name] = lim
		}
	})
	return map[string]tomlconf.Field{
		"auth": d.TableField(map[string]tomlconf.Field{
			"mode": d.String(&a.Mode), "trusted_proxies": d.Strings(&a.TrustedProxies),
			"trusted_proxy_users": d.Strings(&a.TrustedProxyUsers),
			"tailscale_users":     d.StringMap(&a.TailscaleUsers), "admin_group": d.String(&a.AdminGroup),
			"keys_file": d.String(&a.KeysFile), "static_keys_file": d.String(&a.StaticKeysFile),
			"key_ttl": d.Duration(&a.KeyTTL), "key_rate": d.Number(&a.KeyRate), "key_burst": d.Int(&a.KeyBurst),
			"slurm_accounts": d.Bool(&a.SlurmAccounts), "accounts_ttl": d.Duration(&a.AccountsTTL),
		}),
		"usage": d.TableField(map[string]tomlconf.Field{
			"database": d.String(&u.Database), "retention": d.Duration(&u.Retention), "batch": d.Int(&u.Batch),
			"flush": d.Duration(&u.Flush), "queue": d.Int(&u.Queue), "user_label": d.Bool(&u.UserLabel),
		}),
		"fair_share": d.TableField(map[string]tomlconf.Field{
			"enabled": d.Bool(&fs.Enabled), "weights": d.String(&fs.Weights),
			"sshare_ttl": d.Duration(&fs.SshareTTL), "half_life": d.Duration(&fs.HalfLife),
		}),
		"limits": d.TableField(limits),
	}
}

// Check validates the access keys once decoded, and fills the paths that
// default to the front door's state directory dir ([front] state_dir,
// else the top-level state_dir; "" for none). isTier says whether a name
// is a tier of [tiers].
func (c *Config) Check(d *tomlconf.Decoder, dir string, isTier func(string) bool) {
	f := c
	key := func(k ...string) toml.Key { return append(toml.Key{"front"}, k...) }
	a := &f.Auth
	if !d.IsDefined("front", "auth", "keys_file") && dir != "" {
		a.KeysFile = filepath.Join(dir, "keys.json")
	}
	if !d.IsDefined("front", "usage", "database") && dir != "" {
		f.Usage.Database = filepath.Join(dir, "usage.db")
	}
	switch a.Mode {
	case "off", "identify", "required":
	default:
		d.Invalid(key("auth", "mode"), `want "off", "identify" or "required" (got %q)`, a.Mode)
	}
	a.TrustedPrefixes = nil
	for _, s := range a.TrustedProxies {
		p, err := parseProxy(s)
		if err != nil {
			d.Invalid(key("auth", "trusted_proxies"), "%v", err)
			continue
		}
		a.TrustedPrefixes = append(a.TrustedPrefixes, p)
	}
	for _, p := range []struct{ name, path string }{{"keys_file", a.KeysFile}, {"static_keys_file", a.StaticKeysFile},
		{"database", f.Usage.Database}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			k := key("auth", p.name)
			if p.name == "database" {
				k = key("usage", p.name)
			}
			d.Invalid(k, `want an absolute path, or ""`)
		}
	}
	if a.Mode == "required" && a.KeysFile == "" && a.StaticKeysFile == "" && len(a.TrustedPrefixes) == 0 {
		d.Invalid(key("auth", "mode"), `"required" with no keys_file (or state_dir), no static_keys_file and no trusted_proxies: no one could get in`)
	}
	if a.AdminGroup != "" && !validName(a.AdminGroup) {
		d.Invalid(key("auth", "admin_group"), "want a group name (letters, digits, ._-)")
	}
	for login, u := range a.TailscaleUsers {
		if !validName(u) {
			d.Invalid(key("auth", "tailscale_users", login), "want a cluster user name (letters, digits, ._-)")
		}
	}
	if a.KeyTTL < time.Minute || a.KeyTTL > 10*365*24*time.Hour {
		d.Invalid(key("auth", "key_ttl"), "want 1m to 87600h (10 years)")
	}
	if a.KeyRate <= 0 || a.KeyRate > 1000 {
		d.Invalid(key("auth", "key_rate"), "want more than 0 and at most 1000 requests per second")
	}
	if a.KeyBurst < 1 || a.KeyBurst > 1000 {
		d.Invalid(key("auth", "key_burst"), "want 1 to 1000")
	}
	if a.AccountsTTL <= 0 {
		d.Invalid(key("auth", "accounts_ttl"), "want a positive duration")
	}
	c.checkUsageShare(d, key, isTier)
}

// checkUsageShare validates [front.usage], [front.fair_share] and
// [front.limits].
func (c *Config) checkUsageShare(d *tomlconf.Decoder, key func(...string) toml.Key, isTier func(string) bool) {
	f := c
	u := f.Usage
	if u.Retention < 0 {
		d.Invalid(key("usage", "retention"), `want a duration, "0s" to keep every record`)
	}
	if u.Batch < 1 || u.Batch > 10000 {
		d.Invalid(key("usage", "batch"), "want 1 to 10000")
	}
	if u.Flush <= 0 || u.Flush > time.Minute {
		d.Invalid(key("usage", "flush"), "want more than 0s, at most 1m (a crash loses what waits)")
	}
	if u.Queue < u.Batch {
		d.Invalid(key("usage", "queue"), "want at least batch (%d)", u.Batch)
	}
	fs := f.FairShare
	if fs.Weights != "equal" && fs.Weights != "sshare" {
		d.Invalid(key("fair_share", "weights"), `want "equal" or "sshare" (got %q)`, fs.Weights)
	}
	if fs.SshareTTL <= 0 {
		d.Invalid(key("fair_share", "sshare_ttl"), "want a positive duration")
	}
	if fs.HalfLife <= 0 {
		d.Invalid(key("fair_share", "half_life"), "want a positive duration")
	}
	checkLimit := func(k toml.Key, l Limit) {
		for name, v := range map[string]int{"in_flight": l.InFlight, "requests_per_minute": l.RequestsPerMinute,
			"tokens_per_minute": l.TokensPerMinute} {
			if v < 0 {
				d.Invalid(append(k[:len(k):len(k)], name), "want 0 (no limit) or more")
			}
		}
	}
	checkLimit(key("limits"), f.Limits.Default)
	for _, name := range slices.Sorted(maps.Keys(f.Limits.Tiers)) {
		k := key("limits", "tiers", name)
		if !isTier(name) {
			d.Invalid(k, "not a tier of [tiers]")
			continue
		}
		lim, def := f.Limits.Tiers[name], f.Limits.Default
		for _, x := range []struct {
			name     string
			dst, def *int
		}{{"in_flight", &lim.InFlight, &def.InFlight}, {"requests_per_minute", &lim.RequestsPerMinute, &def.RequestsPerMinute},
			{"tokens_per_minute", &lim.TokensPerMinute, &def.TokensPerMinute}} {
			if !d.IsDefined("front", "limits", "tiers", name, x.name) {
				*x.dst = *x.def
			}
		}
		f.Limits.Tiers[name] = lim
		checkLimit(k, lim)
	}
}

// parseProxy reads a trusted proxy: an address or a prefix.
func parseProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: want an IP address or a prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// validName reports whether s is a plausible user, group or account name.
func validName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
