package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// nodesDown says whether any of nodes is down, failed or not responding,
// as `scontrol -o show node N1,N2,…` shows it. A stop notice during such a
// state is a lost node.
func nodesDown(ctx context.Context, nodes []string) (bool, error) {
	if len(nodes) == 0 {
		return false, nil
	}
	out, err := exec.CommandContext(ctx, "scontrol", "-o", "show", "node", strings.Join(nodes, ",")).Output()
	if err != nil {
		return false, fmt.Errorf("scontrol show node: %w", err)
	}
	for _, state := range parseNodeStates(string(out)) {
		if nodeStateDown(state) {
			return true, nil
		}
	}
	return false, nil
}

// parseNodeStates maps each node of `scontrol -o show node` output to its
// State ("IDLE", "ALLOCATED+DRAIN", "DOWN*", "IDLE+NOT_RESPONDING").
func parseNodeStates(out string) map[string]string {
	states := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		var name, state string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "NodeName="); ok {
				name = v
			} else if v, ok := strings.CutPrefix(f, "State="); ok {
				state = v
			}
		}
		if name != "" && state != "" {
			states[name] = state
		}
	}
	return states
}

// nodeStateDown: DOWN, FAIL(ING), NOT_RESPONDING, or "*" (not responding).
func nodeStateDown(state string) bool {
	return strings.HasSuffix(state, "*") || strings.Contains(state, "DOWN") ||
		strings.Contains(state, "FAIL") || strings.Contains(state, "NOT_RESPONDING")
}
