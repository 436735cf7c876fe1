package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/front"
)

func TestParseFrontConfig(t *testing.T) {
	base := anyEnd + "endpoint_dir = \"/e\"\n[tiers.fast]\n[tiers.reasoning]\n"
	for _, tc := range []struct {
		name, toml, wantErr string
	}{
		{name: "none: every tier gets the defaults", toml: base},
		{name: "every key", toml: base + `[front]
listen = "127.0.0.1:8090"
metrics_listen = "127.0.0.1:9467"
hint_listen = "10.77.0.1:9467"
max_header_bytes = "32KiB"
max_body_bytes = "16MiB"
read_header_timeout = "5s"
read_timeout = "1m"
idle_timeout = "90s"
write_timeout = "1m"
connect_timeout = "1s"
fail_timeout = "3s"
hold_max = "5m"
hold_unknown = "10s"
models_refresh = "5s"
access_log = ""
default_model = "qwen"
[front.aliases]
gpt-4o-mini = "qwen"
[front.tiers.reasoning]
hold = "2m"
max_held = 64
max_held_bytes = "8MiB"
models = ["OR1-Behemoth"]
backup_model = "qwen"
prefix = "/reasoning"
`},
		{name: "cors origins and the bodies' bound", toml: base + "[front]\ncors_origins = [\"https://chat.example.org\", \"http://localhost:3000\", \"*\"]\nmax_body_bytes_in_flight = \"1GiB\"\n"},
		{name: "a prefix without its slash", toml: base + "[front.tiers.reasoning]\nprefix = \"reasoning\"\n", wantErr: "c.toml:7: front.tiers.reasoning.prefix: \"reasoning\": want a path such as /reasoning"},
		{name: "a prefix the front door serves", toml: base + "[front.tiers.reasoning]\nprefix = \"/v1\"\n", wantErr: "a path the front door serves itself"},
		{name: "a prefix twice", toml: base + "[front.tiers.fast]\nprefix = \"/llm\"\n[front.tiers.reasoning]\nprefix = \"/llm\"\n", wantErr: "front.tiers.reasoning.prefix: \"/llm\": tier fast has it too"},
		{name: "a prefix with a dot segment", toml: base + "[front.tiers.reasoning]\nprefix = \"/a/../b\"\n", wantErr: "no empty, . or .. segment"},
		{name: "an origin with a path", toml: base + "[front]\ncors_origins = [\"https://x.org/app\"]\n", wantErr: "c.toml:7: front.cors_origins: \"https://x.org/app\": want an origin"},
		{name: "a UI tier that is not a tier", toml: base + "[front]\nui_tier = \"chat\"\n", wantErr: "c.toml:7: front.ui_tier: \"chat\": not a tier"},
		{name: "the UI tier", toml: base + "[front]\nui_tier = \"reasoning\"\n"},
		{name: "bodies' bound below one body", toml: base + "[front]\nmax_body_bytes = \"32MiB\"\nmax_body_bytes_in_flight = \"1MiB\"\n", wantErr: "front.max_body_bytes_in_flight: want at least max_body_bytes"},
		{name: "unknown key at its line", toml: base + "[front]\nlisten = \"127.0.0.1:8090\"\nhodl = \"1s\"\n", wantErr: "c.toml:8: front.hodl: unknown key"},
		{name: "a tier not in [tiers]", toml: base + "[front.tiers.slow]\nhold = \"1s\"\n", wantErr: "c.toml:6: front.tiers.slow: not a tier of [tiers]"},
		{name: "hold over hold_max", toml: base + "[front]\nhold_max = \"1m\"\n[front.tiers.fast]\nhold = \"2m\"\n", wantErr: "c.toml:9: front.tiers.fast.hold: want 0s to hold_max"},
		{name: "listen without a port", toml: base + "[front]\nlisten = \"127.0.0.1\"\n", wantErr: "c.toml:7: front.listen: want host:port"},
		{name: "metrics on the client port", toml: base + "[front]\nlisten = \"127.0.0.1:8090\"\nmetrics_listen = \"127.0.0.1:8090\"\n",
			wantErr: "c.toml:8: front.metrics_listen: the same address as listen"},
		{name: "a size without its unit", toml: base + "[front]\nmax_body_bytes = 1000\n", wantErr: "c.toml:7: front.max_body_bytes: must be a size"},
		{name: "tiny header limit", toml: base + "[front]\nmax_header_bytes = \"1KiB\"\n", wantErr: "c.toml:7: front.max_header_bytes: want 4 KiB to 1 MiB"},
		{name: "empty alias target", toml: base + "[front.aliases]\nx = \"\"\n", wantErr: "front.aliases.x"},
		{name: "zero timeout", toml: base + "[front]\nidle_timeout = \"0s\"\n", wantErr: "c.toml:7: front.idle_timeout: want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("c.toml", []byte(tc.toml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Front.Tiers) != 2 {
				t.Errorf("front tiers: %v, want one per tier", cfg.Front.Tiers)
			}
		})
	}
	cfg, err := Parse("c.toml", []byte(base+"[front.tiers.reasoning]\nhold = \"2m\"\nmodels = [\"OR1\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]front.TierConfig{"fast": front.DefaultTier,
		"reasoning": {Hold: 2 * time.Minute, MaxHeld: 256, MaxHeldBytes: 64 << 20, Models: []string{"OR1"}, Continue: true}}
	if d := cmp.Diff(want, cfg.Front.Tiers); d != "" {
		t.Errorf("front tiers (-want +got):\n%s", d)
	}
}
