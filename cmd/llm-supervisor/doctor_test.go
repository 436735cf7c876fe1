package main

import (
	"path/filepath"
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
