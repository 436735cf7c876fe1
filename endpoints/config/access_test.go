package config

import (
	"net/netip"
	"os"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/front"
)

func TestParseFrontAccess(t *testing.T) {
	base := anyEnd + "endpoint_dir = \"/e\"\nstate_dir = \"/var/lib/slurm-llm\"\n[tiers.fast]\n[tiers.reasoning]\n"
	for _, tc := range []struct {
		name, toml, wantErr string
	}{
		{name: "none: the defaults", toml: base},
		{name: "every key", toml: base + `[front.auth]
mode = "required"
trusted_proxies = ["127.0.0.1", "::1", "100.64.0.0/10"]
tailscale_users = { "alice@example.com" = "alice" }
admin_group = "llmadmin"
keys_file = "/var/lib/slurm-llm/k.json"
static_keys_file = "/etc/slurm-llm/static.keys"
key_ttl = "720h"
key_rate = 0.5
key_burst = 3
slurm_accounts = false
accounts_ttl = "1h"
[front.usage]
database = "/var/lib/slurm-llm/u.db"
retention = "0s"
batch = 64
flush = "500ms"
queue = 1024
user_label = true
[front.fair_share]
enabled = false
weights = "sshare"
sshare_ttl = "1m"
half_life = "30m"
[front.limits]
in_flight = 8
requests_per_minute = 120
tokens_per_minute = 100000
[front.limits.tiers.reasoning]
in_flight = 2
`},
		{name: "a mode misspelt", toml: base + "[front.auth]\nmode = \"requried\"\n", wantErr: `c.toml:8: front.auth.mode: want "off", "identify" or "required"`},
		{name: "a proxy that is a name", toml: base + "[front.auth]\ntrusted_proxies = [\"localhost\"]\n", wantErr: "c.toml:8: front.auth.trusted_proxies: \"localhost\": want an IP address"},
		{name: "required with no way in", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[front.auth]\nmode = \"required\"\ntrusted_proxies = []\n",
			wantErr: "front.auth.mode: \"required\" with no keys_file"},
		{name: "a relative static keys file", toml: base + "[front.auth]\nstatic_keys_file = \"static.keys\"\n", wantErr: "c.toml:8: front.auth.static_keys_file: want an absolute path"},
		{name: "a relative database", toml: base + "[front.usage]\ndatabase = \"u.db\"\n", wantErr: "c.toml:8: front.usage.database: want an absolute path"},
		{name: "a tailscale user that is not a name", toml: base + "[front.auth.tailscale_users]\n\"a@b\" = \"x y\"\n", wantErr: `front.auth.tailscale_users."a@b": want a cluster user name`},
		{name: "an unknown key", toml: base + "[front.auth]\nmdoe = \"off\"\n", wantErr: "c.toml:8: front.auth.mdoe: unknown key"},
		{name: "no key life", toml: base + "[front.auth]\nkey_ttl = \"0s\"\n", wantErr: "front.auth.key_ttl: want 1m"},
		{name: "no key rate", toml: base + "[front.auth]\nkey_rate = 0\n", wantErr: "front.auth.key_rate"},
		{name: "a queue shorter than a batch", toml: base + "[front.usage]\nbatch = 100\nqueue = 10\n", wantErr: "c.toml:9: front.usage.queue: want at least batch"},
		{name: "weights misspelt", toml: base + "[front.fair_share]\nweights = \"shares\"\n", wantErr: "front.fair_share.weights"},
		{name: "a negative limit", toml: base + "[front.limits]\nin_flight = -1\n", wantErr: "c.toml:8: front.limits.in_flight: want 0"},
		{name: "limits of a tier not in [tiers]", toml: base + "[front.limits.tiers.slow]\nin_flight = 1\n", wantErr: "c.toml:7: front.limits.tiers.slow: not a tier of [tiers]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tc.toml))
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestFrontAccessDefaults(t *testing.T) {
	cfg, err := Parse("c.toml", []byte(anyEnd+"endpoint_dir = \"/e\"\nstate_dir = \"/s\"\n[tiers.fast]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := access.AuthConfig{Mode: "identify", TrustedProxies: []string{"127.0.0.1", "::1"}, TrustedProxyUsers: []string{"root"},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")},
		KeysFile:        "/s/keys.json", KeyTTL: 2160 * time.Hour, KeyRate: 1, KeyBurst: 5, SlurmAccounts: true, AccountsTTL: 10 * time.Minute}
	prefixes := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
	if d := cmp.Diff(want, cfg.Front.Access.Auth, prefixes); d != "" {
		t.Errorf("auth (-want +got):\n%s", d)
	}
	if d := cmp.Diff(access.UsageConfig{Database: "/s/usage.db", Retention: 400 * 24 * time.Hour, Batch: 256, Flush: time.Second, Queue: 4096}, cfg.Front.Access.Usage); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
	if d := cmp.Diff(access.FairShareConfig{Enabled: true, Weights: "equal", SshareTTL: 5 * time.Minute, HalfLife: 10 * time.Minute}, cfg.Front.Access.FairShare); d != "" {
		t.Errorf("fair share (-want +got):\n%s", d)
	}
	// no state_dir: no keys file, no database
	cfg, err = Parse("c.toml", []byte(anyEnd+"endpoint_dir = \"/e\"\n[tiers.fast]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Front.Access.Auth.KeysFile != "" || cfg.Front.Access.Usage.Database != "" {
		t.Errorf("without state_dir: keys %q database %q, want none", cfg.Front.Access.Auth.KeysFile, cfg.Front.Access.Usage.Database)
	}
	if d := front.DefaultConfig(); d.Access.Auth.Mode != "identify" || d.Access.Usage.Batch != 256 || d.Access.Limits.Tiers == nil {
		t.Errorf("front.DefaultConfig lacks the access defaults: %+v", d.Access.Auth)
	}
}

// TestTierLimitsTakeTheDefaultsLeftOut: a tier's limits table sets only
// what it writes; the rest are [front.limits]' (written after it or not).
func TestTierLimitsTakeTheDefaultsLeftOut(t *testing.T) {
	cfg, err := Parse("c.toml", []byte(anyEnd+"endpoint_dir = \"/e\"\n[tiers.fast]\n[tiers.reasoning]\n"+
		"[front.limits]\nin_flight = 8\ntokens_per_minute = 1000\n[front.limits.tiers.reasoning]\nin_flight = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := access.LimitsConfig{Default: access.Limit{InFlight: 8, TokensPerMinute: 1000},
		Tiers: map[string]access.Limit{"reasoning": {InFlight: 2, TokensPerMinute: 1000}}}
	if d := cmp.Diff(want, cfg.Front.Access.Limits); d != "" {
		t.Errorf("limits (-want +got):\n%s", d)
	}
}

// The shipped upstreams.toml identifies users and limits the reasoning
// tier's in-flight requests per user.
func TestShippedAccessKeys(t *testing.T) {
	cfg, err := parse("../../etc/upstreams.toml", mustRead(t, "../../etc/upstreams.toml"), func(name string) (*user.User, error) {
		return &user.User{Username: name, Uid: "990"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Front.Access.Auth.Mode != "identify" || !cfg.Front.Access.FairShare.Enabled || cfg.Front.Access.Limits.Tiers["reasoning"].InFlight != 8 {
		t.Errorf("shipped: auth %+v fair share %+v limits %+v", cfg.Front.Access.Auth, cfg.Front.Access.FairShare, cfg.Front.Access.Limits)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
