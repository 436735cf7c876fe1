package slurm

import (
	"context"
	"fmt"
	"strings"
)

// NodesDown reports whether any of nodes is down, failed or not responding,
// as `scontrol -o show node N1,N2,…` shows it. A stop notice while a node
// of the job is in such a state is a lost node. An error means Slurm was
// not asked (or did not answer), never "no node down".
func (c *Client) NodesDown(ctx context.Context, nodes []string) (bool, error) {
	if len(nodes) == 0 {
		return false, nil
	}
	out, err := c.run(ctx, c.scontrol(), "-o", "show", "node", strings.Join(nodes, ","))
	if err != nil {
		return false, fmt.Errorf("node states %v: %w", nodes, err)
	}
	for _, state := range parseNodeStates(out) {
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
		f := parseKeyValues(line)
		if name, state := f["NodeName"], f["State"]; name != "" && state != "" {
			states[name] = state
		}
	}
	return states
}

// nodeStateDown: DOWN, FAIL(ING), NOT_RESPONDING, or "*" (not responding).
// 22.05 on print "+NOT_RESPONDING"; 20.11 puts a "*" after the base state,
// before its other flags ("IDLE*+DRAIN", src/api/node_info.c at
// slurm-20-11-9-1), so the '*' is looked for anywhere.
func nodeStateDown(state string) bool {
	return strings.Contains(state, "*") || strings.Contains(state, "DOWN") ||
		strings.Contains(state, "FAIL") || strings.Contains(state, "NOT_RESPONDING")
}
