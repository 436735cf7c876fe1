package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/cmd/internal/doctor"
	"slurm-llm/supervisor/tier"
)

// The node's doctor checks the shipped tiers' directories and ports: the
// heads' (8080, 8081) and rpc-server's 50052 (port_step 0 in
// reasoning.toml, one member per node in the elastic tier).
func TestAddTierShipped(t *testing.T) {
	var n doctor.Node
	for _, name := range []string{"fast.toml", "reasoning.toml", "reasoning-elastic.toml"} {
		cfg, err := tier.LoadConfig(filepath.Join("..", "..", "etc", name))
		if err != nil {
			t.Fatal(err)
		}
		addTier(&n, cfg)
	}
	want := doctor.Node{
		EndpointDirs: []string{"/cluster/shared/ai/endpoints", "/cluster/shared/ai/endpoints", "/cluster/shared/ai/endpoints"},
		LogDirs:      []string{"/cluster/shared/ai/logs", "/cluster/shared/ai/logs", "/cluster/shared/ai/logs"},
		HeadPorts:    []int{8080, 8081, 8081}, RPCPorts: []int{50052, 50052},
	}
	if d := cmp.Diff(want, n); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// A distributed tier whose workers step their ports: every worker's port.
func TestAddTierPortStep(t *testing.T) {
	cfg := &tier.Config{EndpointDir: "/e", LogDir: "/l", MinWorkers: 3,
		Head: tier.ProcessConfig{Port: 8081}, Worker: &tier.ProcessConfig{Port: 50052, PortStep: 2}}
	var n doctor.Node
	addTier(&n, cfg)
	if d := cmp.Diff([]int{50052, 50054, 50056}, n.RPCPorts); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestInstalledTierConfigs: a doctor run without --config takes the tier
// configs in the directory, not upstreams.toml or keeper.toml (whose
// tables may hold a tier key), and says so when there is none.
func TestInstalledTierConfigs(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"fast.toml":      "# a tier\ntier = \"fast\"\n[head]\nport = 8080\n",
		"reasoning.toml": "log_dir = \"/x\"\n  tier =\"reasoning\"\ntier= \"reasoning\"\n",
		"upstreams.toml": "endpoint_dir = \"/e\"\n[tiers.fast]\ntier = \"not top level\"\n",
		"keeper.toml":    "[[tier]]\nname = \"fast\"\n",
		"notes.txt":      "tier = \"x\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := installedTierConfigs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "fast.toml"), filepath.Join(dir, "reasoning.toml")}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tier configs (-want +got):\n%s", d)
	}
	if _, err := installedTierConfigs(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("an empty directory: %v, want an error naming --config", err)
	}
}
