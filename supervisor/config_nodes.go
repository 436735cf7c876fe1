package supervisor

import (
	"fmt"
	"strings"
)

// NodeAddresses returns each node's address as node_address says: from
// Slurm (fromSlurm, e.g. NodeAddr of `scontrol show node`), the node name
// itself, or the node_address template. fromSlurm is called only for
// "slurm" and must return an address for every node.
func (c *Config) NodeAddresses(nodes []string, fromSlurm func([]string) (map[string]string, error)) (map[string]string, error) {
	out := make(map[string]string, len(nodes))
	switch c.NodeAddress {
	case NodeAddressSlurm:
		if fromSlurm == nil {
			return nil, fmt.Errorf("node addresses of tier %s: node_address is %q but no way to ask Slurm was given", c.Tier, NodeAddressSlurm)
		}
		got, err := fromSlurm(nodes)
		if err != nil {
			return nil, fmt.Errorf("node addresses of tier %s: %w", c.Tier, err)
		}
		for _, n := range nodes {
			if strings.TrimSpace(got[n]) == "" {
				return nil, fmt.Errorf("node addresses of tier %s: Slurm gave no address for node %s", c.Tier, n)
			}
			out[n] = got[n]
		}
	case NodeAddressName:
		for _, n := range nodes {
			out[n] = n
		}
	default:
		for _, n := range nodes {
			a, err := expandTemplate(c.NodeAddress, map[string]string{phNode: n})
			if err != nil {
				return nil, fmt.Errorf("node addresses of tier %s: node_address: %w", c.Tier, err)
			}
			out[n] = a
		}
	}
	return out, nil
}
