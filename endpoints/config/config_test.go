package config

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// anyEnd opts out of the owner and network checks, for cases about other keys.
const anyEnd = "allow_any_owner = true\nallow_any_network = true\n"

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		toml    string
		wantErr string // substring; "" means valid
	}{
		{name: "minimal", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n"},
		// Regression: empty lists meant any owner and any address, so
		// whoever could write the endpoint directory could route the
		// site's users anywhere, the controller's loopback included.
		{name: "no owners and no networks refused", toml: "endpoint_dir = \"/e\"\n[tiers.fast]\n",
			wantErr: "c.toml: allowed_owners: empty: list the accounts"},
		{name: "empty networks refused at their line", toml: "allow_any_owner = true\nallowed_networks = []\nendpoint_dir = \"/e\"\n[tiers.fast]\n",
			wantErr: "c.toml:2: allowed_networks: empty: list the networks"},
		{name: "both lists set", toml: "allowed_owners = [\"0\"]\nallowed_networks = [\"10.0.0.0/8\"]\nendpoint_dir = \"/e\"\n[tiers.fast]\n"},
		{name: "an opt-out beside a list is a contradiction", toml: "allow_any_owner = true\nallowed_owners = [\"0\"]\nallow_any_network = true\nendpoint_dir = \"/e\"\n[tiers.fast]\n",
			wantErr: "c.toml:1: allow_any_owner: true but allowed_owners lists"},
		{name: "unknown top key", toml: anyEnd + "endpoint_dir = \"/e\"\nendpiont_dir = \"/x\"\n[tiers.fast]\n", wantErr: "c.toml:4: endpiont_dir: unknown key"},
		{name: "unknown nested key", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n\n[nginx]\ntset = [\"x\"]\n", wantErr: "c.toml:7: nginx.tset: unknown key"},
		{name: "unknown tier key", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\nbakup = \"x\"\n", wantErr: "c.toml:5: tiers.fast.bakup: unknown key"},
		{name: "no tiers", toml: anyEnd + "endpoint_dir = \"/e\"\n", wantErr: "at least one"},
		{name: "bad tier name", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.Fast]\n", wantErr: "tier \"Fast\""},
		{name: "backup unknown", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.r]\nbackup = \"fast\"\n", wantErr: "tiers.r.backup"},
		{name: "backup itself", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.r]\nbackup = \"r\"\n", wantErr: "tiers.r.backup"},
		{name: "colliding nginx names", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.a-b]\n[tiers.a_b]\n", wantErr: "same nginx name"},
		{name: "relative dir", toml: "endpoint_dir = \"e\"\n[tiers.fast]\n", wantErr: "endpoint_dir"},
		{name: "bad duration", toml: anyEnd + "endpoint_dir = \"/e\"\nsweep_interval = \"soon\"\n[tiers.fast]\n", wantErr: "soon"},
		// Regression: sweep_interval = 5 was taken as 5 ns, and watch ran
		// passes and squeue calls back to back.
		{name: "a bare number as a duration", toml: anyEnd + "endpoint_dir = \"/e\"\nsweep_interval = 5\n[tiers.fast]\n", wantErr: "c.toml:4: sweep_interval: "},
		{name: "hint listener", toml: anyEnd + "endpoint_dir = \"/e\"\nhint_listen = \"10.77.0.1:9466\"\n[tiers.fast]\n"},
		{name: "hint listener without a port", toml: anyEnd + "endpoint_dir = \"/e\"\nhint_listen = \"10.77.0.1\"\n[tiers.fast]\n",
			wantErr: "c.toml:4: hint_listen: want host:port"},
		{name: "hint listener on port 0", toml: anyEnd + "endpoint_dir = \"/e\"\nhint_listen = \"10.77.0.1:0\"\n[tiers.fast]\n",
			wantErr: "c.toml:4: hint_listen: want a port"},
		{name: "zero duration", toml: anyEnd + "endpoint_dir = \"/e\"\nsweep_interval = \"0s\"\n[tiers.fast]\n", wantErr: "sweep_interval"},
		{name: "empty reload argv", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[nginx]\nreload = []\n", wantErr: "nginx.reload"},
		{name: "networks", toml: "allow_any_owner = true\nendpoint_dir = \"/e\"\nallowed_networks = [\"10.0.0.0/8\", \"fd00::/8\"]\n[tiers.fast]\n"},
		{name: "bad network", toml: "allow_any_owner = true\nendpoint_dir = \"/e\"\nallowed_networks = [\"10.0.0.0\"]\n[tiers.fast]\n", wantErr: "allowed_networks"},
		{name: "numeric owner", toml: "allow_any_network = true\nendpoint_dir = \"/e\"\nallowed_owners = [\"0\", \"root\"]\n[tiers.fast]\n"},
		{name: "outage, record and stale keys", toml: anyEnd + "endpoint_dir = \"/e\"\nstate_dir = \"/s\"\n[tiers.fast]\n[outage]\nretry_after = \"20s\"\nretry_after_max = \"10m\"\nready_samples = 5\n[record]\nmax_size = 1048576\n[stale]\nremove = false\ngrace = \"1h\"\ninterval = \"5m\"\n"},
		{name: "relative state dir", toml: anyEnd + "endpoint_dir = \"/e\"\nstate_dir = \"s\"\n[tiers.fast]\n", wantErr: "c.toml:4: state_dir: want an absolute path"},
		{name: "retry_after under a second", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[outage]\nretry_after = \"0s\"\n", wantErr: "outage.retry_after"},
		{name: "no ready samples", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[outage]\nready_samples = 0\n", wantErr: "outage.ready_samples: want 1 to 1000"},
		{name: "a tiny record", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[record]\nmax_size = 100\n", wantErr: "record.max_size"},
		{name: "no stale grace", toml: anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[stale]\ngrace = \"0s\"\n", wantErr: "stale.grace"},
		{name: "unknown owner", toml: "allow_any_network = true\nendpoint_dir = \"/e\"\nallowed_owners = [\"no-such-user-xyz\"]\n[tiers.fast]\n", wantErr: "allowed_owners"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tt.toml))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Parse = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Parse = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// Every problem is reported at once, sorted by line, each naming the file,
// the line (its table's when the key is missing) and the key.
func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := Parse("c.toml", []byte(`endpoint_dir = "e"
allow_any_owner = true
sweep_interval = 5
coalesce = "0s"
allowed_networks = ["10.0.0.0/8", "10.0.0.0"]
[tiers.fast]
backup = "slow"
[nginx]
reload = []
[scheduler]
check = "yes"
`))
	want := []string{
		"c.toml:1: endpoint_dir: want an absolute path",
		`c.toml:3: sweep_interval: must be a duration string like "30s" (got integer)`,
		"c.toml:4: coalesce: want a positive duration",
		`c.toml:5: allowed_networks: element 1: netip.ParsePrefix("10.0.0.0"): no '/'`,
		`c.toml:7: tiers.fast.backup: "slow" is not another configured tier`,
		"c.toml:9: nginx.reload: want a non-empty argv",
		"c.toml:11: scheduler.check: must be a boolean (got string)",
	}
	if err == nil {
		t.Fatal("Parse: no error")
	}
	if d := cmp.Diff(want, strings.Split(strings.TrimPrefix(err.Error(), "load config: "), "\n")); d != "" {
		t.Errorf("problems (-want +got):\n%s", d)
	}
}

// The shipped example must load and mean what it says.
func TestShippedConfig(t *testing.T) {
	path := filepath.Join("..", "..", "etc", "upstreams.toml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s yet", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The service account need not exist where the tests run.
	lookup := func(name string) (*user.User, error) {
		if name == "slurm-llm" {
			return &user.User{Username: name, Uid: "990"}, nil
		}
		return user.Lookup(name)
	}
	cfg, err := parse(path, b, lookup)
	if err != nil {
		t.Fatalf("load shipped config: %v", err)
	}
	if d := cmp.Diff([]uint32{990}, cfg.AllowedUIDs); d != "" || len(cfg.AllowedPrefixes) == 0 || cfg.AllowAnyOwner || cfg.AllowAnyNetwork {
		t.Errorf("shipped config is not deny-by-default: uids (-want +got):\n%s networks %v any owner %v any network %v",
			d, cfg.AllowedPrefixes, cfg.AllowAnyOwner, cfg.AllowAnyNetwork)
	}
	want := []tiers.TierSpec{{Name: "fast", RetryAfter: 30}, {Name: "reasoning", Backup: "fast", RetryAfter: 30}}
	if d := cmp.Diff(want, cfg.TierSpecs()); d != "" {
		t.Errorf("tiers (-want +got):\n%s", d)
	}
	if cfg.SweepInterval != time.Second || cfg.Nginx.OutputDir != "/etc/nginx/slurm-llm" {
		t.Errorf("sweep %v output %s", cfg.SweepInterval, cfg.Nginx.OutputDir)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Parse("c.toml", []byte(anyEnd+"endpoint_dir = \"/e\"\n[tiers.fast]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.Nginx.OutputDir, cfg.Nginx.Test, cfg.Nginx.Reload, cfg.SweepInterval, cfg.Coalesce, cfg.Scheduler.Check,
		cfg.StateDir, cfg.Outage, cfg.Record, cfg.Stale}
	want := []any{"/etc/nginx/slurm-llm", []string{"nginx", "-t", "-q"}, []string{"nginx", "-s", "reload"},
		time.Second, 100 * time.Millisecond, true, "",
		tiers.OutageConfig{RetryAfter: 30 * time.Second, RetryAfterMax: time.Hour, ReadySamples: 20},
		tiers.RecordConfig{MaxSize: 8 << 20}, tiers.StaleConfig{Remove: true, Grace: 10 * time.Minute, Interval: time.Minute}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("endpoint_dir = \"/e\"\n[tiers.fast]\n[tiers.r]\nbackup = \"fast\"\n"))
	f.Add([]byte("[nginx]\ntest = [\"a\"]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse("f.toml", b)
		if err != nil {
			return
		}
		for _, ts := range cfg.TierSpecs() {
			if endpoints.CheckTier(ts.Name) != nil {
				t.Fatalf("accepted bad tier %q", ts.Name)
			}
		}
	})
}
