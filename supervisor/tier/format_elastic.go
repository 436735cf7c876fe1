package tier

import (
	"fmt"
	"io"
	"math"
	"net"
	"path"
	"strconv"
	"strings"

	"slurm-llm/endpoints"
)

// FormatElastic writes for people (check-config) what an elastic tier runs
// on members (ExampleMembers: the leader first): its [elastic] settings;
// for each node count, the most first, the context, the tensor split, the
// memory each GPU needs (with model_size set) and the head the leader runs
// over the first other members, or that the count is not served; then the
// rpc-server of each member that does not lead, and the settings in force.
func FormatElastic(w io.Writer, c *Config, members []Member) error {
	e := c.Elastic
	if e == nil || len(members) != e.Members {
		return fmt.Errorf("format tier %s: want an elastic tier and its %d members", c.Tier, len(members))
	}
	full, _, err := c.LeaderPlan(members[0], members[1:])
	if err != nil {
		return err
	}
	var b strings.Builder
	formatElasticHeader(&b, c, full, members)
	for n := e.Members; n >= 1; n-- {
		if err := formatNodeCount(&b, c, members, n); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "\nA member that does not lead runs its rpc-server (here %s):\n", nodeNames(members[1:]))
	for _, m := range members[1:] {
		proc, err := c.MemberWorker(m)
		if err != nil {
			return err
		}
		formatProcess(&b, full, proc)
	}
	formatSettings(&b, full)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("format tier %s: %w", c.Tier, err)
	}
	return nil
}

// formatElasticHeader writes the tier and its [elastic] settings.
func formatElasticHeader(b *strings.Builder, c *Config, full *Plan, members []Member) {
	e := c.Elastic
	fmt.Fprintf(b, "tier %s (%s, elastic), job %s, restart %d\n", c.Tier, c.Kind, full.JobID, full.RestartCount)
	fmt.Fprintf(b, "  members   %d one-node jobs: %s (%s leads here; in the tier, the youngest usable member leads)\n",
		e.Members, nodeNames(members), members[0].Node)
	fmt.Fprintf(b, "  model     %s (every member checks it can read it: any member may lead)\n", e.Model)
	fmt.Fprintf(b, "  lead      lease %s, skew %s (a leader leads until skew + %s before its lease ends: %s after each renewal)\n",
		e.Lease, e.Skew, LeadMargin, e.Lease-e.Skew-LeadMargin)
	grow := "never (grow_after 0): a smaller plan stays until the head restarts"
	if e.GrowAfter > 0 {
		grow = fmt.Sprintf("after %s with no request in flight, to the plan for the members back", e.GrowAfter)
	}
	fmt.Fprintf(b, "  grow      %s\n", grow)
	if e.ModelSize > 0 {
		gpu := "gpu_memory not set (not checked)"
		if e.GPUMemory > 0 {
			gpu = "per GPU " + sizeString(float64(e.GPUMemory))
		}
		fmt.Fprintf(b, "  memory    %s; model %s, KV cache %s per token, overhead %s\n",
			gpu, sizeString(float64(e.ModelSize)), sizeString(float64(e.KVPerToken)), sizeString(float64(e.Overhead)))
	}
	fmt.Fprintf(b, "  endpoint  %s  (file %s)\n", net.JoinHostPort(full.EndpointHost, strconv.Itoa(full.EndpointPort)),
		path.Join(full.EndpointDir, endpoints.FileName(full.Tier, full.JobID)))
	fmt.Fprintf(b, "  logs      %s (each member's under its own job id)\n", full.LogDir)
}

// formatNodeCount writes what the tier runs with n members up: the plan
// for n nodes and the head over the first n-1 other members, the smaller
// plan it falls back to, or that it is not served.
func formatNodeCount(b *strings.Builder, c *Config, members []Member, n int) error {
	e := c.Elastic
	k, np, ok := e.PlanFor(n)
	switch {
	case !ok:
		fmt.Fprintf(b, "\n%s: not served\n", plural(n, "node"))
		return nil
	case k < n:
		fmt.Fprintf(b, "\n%s: runs the plan for %d (no [elastic.plans.%d]; %s idle)\n", plural(n, "node"), k, n, plural(n-k, "rpc-server"))
		return nil
	}
	p, _, err := c.LeaderPlan(members[0], members[1:n])
	if err != nil {
		return err
	}
	weights := make([]string, len(np.TensorSplit))
	for i, x := range np.TensorSplit {
		weights[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	fmt.Fprintf(b, "\n%d nodes: context %d, tensor split %s (head first)\n", n, np.Ctx, strings.Join(weights, "/"))
	if mem, ok := e.Memory(np); ok {
		for i, m := range mem {
			of := ""
			if e.GPUMemory > 0 {
				of = " of " + sizeString(float64(e.GPUMemory))
			}
			fmt.Fprintf(b, "  memory    %s %s%s (%.0f%% of the model %s, of the KV cache %s, overhead %s)\n",
				members[i].Node, sizeString(m.Need()), of, m.Share*100, sizeString(m.Model), sizeString(m.KV), sizeString(m.Overhead))
		}
	}
	formatProcess(b, p, p.Head)
	return nil
}

// nodeNames lists the members' nodes.
func nodeNames(ms []Member) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Node
	}
	return strings.Join(names, ", ")
}

// sizeString writes bytes in the largest binary unit that leaves at least
// 1, to one decimal: "43.4 GiB", "90.0 KiB".
func sizeString(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && math.Abs(b) >= 1024 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
