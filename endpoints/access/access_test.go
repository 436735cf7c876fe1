package access

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"slurm-llm/endpoints/access/share"
	"slurm-llm/endpoints/access/usage"
	"slurm-llm/endpoints/tomlconf"
)

// parseAccess reads access's tables of doc's [front] as the file's loader
// does (endpoints/config), with the front door's state directory dir and
// tiers the tiers of [tiers].
func parseAccess(doc, dir string, tiers ...string) (Config, error) {
	c := DefaultConfig()
	err := tomlconf.Decode("c.toml", []byte(doc),
		func(d *tomlconf.Decoder) {
			d.Root(map[string]tomlconf.Field{"front": d.TableField(c.Fields(d))})
		},
		func(d *tomlconf.Decoder) {
			c.Check(d, dir, func(name string) bool { return slices.Contains(tiers, name) })
		})
	return c, err
}

// TestNewFromConfig builds the parts from upstreams.toml's keys: the keys
// file and database under state_dir, a static key that names its service
// account, limits that a reload replaces; a static keys file others can
// read stops New with an error naming it.
func TestNewFromConfig(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "static.keys")
	svcKey := strings.Repeat("s", 40)
	os.WriteFile(static, []byte("svc-bot ops "+svcKey+"\n"), 0o644)
	os.Chmod(static, 0o644)
	conf := func(inFlight string) Config {
		cfg, err := parseAccess("[front.auth]\nmode = \"required\"\nstatic_keys_file = \""+static+
			"\"\nslurm_accounts = false\n[front.limits]\nin_flight = "+inFlight+"\n", dir, "fast")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if _, err := New(conf("1"), Options{}); err == nil || !strings.Contains(err.Error(), static) {
		t.Fatalf("New with a 0644 static keys file: %v, want an error naming it", err)
	}
	os.Chmod(static, 0o600)
	a, err := New(conf("1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer "+svcKey)
	id, err := a.Identifier.Identify(r)
	if err != nil || id.User != "svc-bot" || id.Account != "ops" {
		t.Errorf("Identify with the static key: %+v, %v", id, err)
	}
	if a.Keys == nil || a.Usage == nil || a.Weights != nil || !a.FairShare || len(a.Collectors()) != 2 {
		t.Errorf("parts: keys %v usage %v weights %v fair %v", a.Keys != nil, a.Usage != nil, a.Weights, a.FairShare)
	}
	a.Limiter.Admit("fast", "alice")
	if d := a.Limiter.Admit("fast", "alice"); d.OK || d.Limit != share.LimitInFlight {
		t.Errorf("second request under in_flight 1: %+v", d)
	}
	if err := a.Reload(conf("2")); err != nil {
		t.Fatal(err)
	}
	if d := a.Limiter.Admit("fast", "alice"); !d.OK {
		t.Errorf("after a reload to in_flight 2: %+v", d)
	}
	a.Usage.Add(usage.Record{User: "svc-bot", Account: "ops", Tier: "fast", Outcome: "answered", Status: 200})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "usage.db")); err != nil {
		t.Errorf("no usage database in state_dir: %v", err)
	}
}
