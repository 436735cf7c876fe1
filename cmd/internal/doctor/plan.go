package doctor

import (
	"context"
	"net"
	"slices"
	"strconv"
)

// Controller is what the controller's checks take from upstreams.toml.
type Controller struct {
	// EndpointDir, OutputDir: endpoint_dir and output_dir.
	EndpointDir, OutputDir string
	// StateDirs are state_dir and [front] state_dir ("" when unset);
	// their units make them.
	StateDirs []string
	// AllowedOwners is allowed_owners (nil: any owner).
	AllowedOwners []string
	// FrontListen is [front] listen ("" without a front door); HintListen
	// and FrontHintListen the UDP hint listeners.
	FrontListen, HintListen, FrontHintListen string
	// NeedAccounts says Slurm accounting is needed, and Why by what.
	NeedAccounts bool
	Why          string
	// Nginx is the nginx the watcher tests ([nginx] test: the binary and
	// its -c, -p and -g arguments); nil is "nginx" from PATH with its
	// own nginx.conf.
	Nginx []string
}

// ShippedListens are the shipped nginx sites' listen directives (used
// when no site is included yet).
var ShippedListens = []Listen{{"127.0.0.1", 8080}, {"127.0.0.1", 8081}, {"127.0.0.1", 8088}}

// CheckController gathers the controller's facts and checks them, in the
// report's order.
func CheckController(ctx context.Context, h Host, c Controller) []Result {
	se := GatherSELinux(ctx, h)
	ng := GatherNginx(ctx, h, c.Nginx...)
	listens := ng.SiteListens(c.OutputDir, ShippedListens)
	rs := []Result{CheckSELinuxMode(se), CheckSELinuxBoolean(se), CheckSELinuxPorts(se, listenPorts(listens)),
		CheckNginxTest(ng), CheckNginxSite(ng, SiteTiers, c.OutputDir, false)}
	if c.FrontListen != "" {
		rs = append(rs, CheckNginxSite(ng, SiteFront, c.OutputDir, true))
	}
	rs = append(rs, CheckFirewallOpen(GatherFirewall(ctx, h), controllerPorts(c, listens)))
	rs = append(rs, commonChecks(ctx, h, true, c.NeedAccounts, c.Why)...)
	rs = append(rs,
		CheckDir(Dir{Path: c.EndpointDir, Role: "endpoint_dir", Owners: c.AllowedOwners, Owner: first(c.AllowedOwners)}, h.Stat(c.EndpointDir)),
		CheckDir(Dir{Path: c.OutputDir, Role: "output_dir"}, h.Stat(c.OutputDir)))
	for _, d := range c.StateDirs {
		if d != "" {
			rs = append(rs, CheckDir(Dir{Path: d, Role: "state_dir", MadeByUnit: true}, h.Stat(d)))
		}
	}
	return append(rs, CheckSystemd(GatherSystemd(ctx, h)))
}

// Node is what a GPU node's checks take from its tier configs.
type Node struct {
	// EndpointDirs and LogDirs are the tiers' endpoint_dir and log_dir.
	EndpointDirs, LogDirs []string
	// HeadPorts are the heads' ports (nginx on the controller reaches
	// them); RPCPorts the rpc-servers' (only the heads should).
	HeadPorts, RPCPorts []int
	// SlotSaves are the tiers' slot save directories ([head] slot_save_dir).
	SlotSaves []SlotSave
}

// CheckNode gathers a node's facts and checks them, in the report's
// order.
func CheckNode(ctx context.Context, h Host, n Node) []Result {
	rs := commonChecks(ctx, h, false, false, "")
	fw := GatherFirewall(ctx, h)
	var heads, rpcs []Port
	for _, p := range uniq(n.HeadPorts) {
		heads = append(heads, Port{Port: p, Proto: "tcp", What: "llama-server head"})
	}
	for _, p := range uniq(n.RPCPorts) {
		rpcs = append(rpcs, Port{Port: p, Proto: "tcp", What: "rpc-server"})
	}
	rs = append(rs, CheckFirewallOpen(fw, heads), CheckRPCExposure(fw, rpcs))
	for _, d := range uniqStrings(n.EndpointDirs) {
		rs = append(rs, CheckDir(Dir{Path: d, Role: "endpoint_dir", Owner: "slurm-llm"}, h.Stat(d)))
	}
	for _, d := range uniqStrings(n.LogDirs) {
		rs = append(rs, CheckDir(Dir{Path: d, Role: "log_dir", Owner: "slurm-llm"}, h.Stat(d)))
	}
	for _, s := range n.SlotSaves {
		if h.WriteSpeed == nil {
			continue
		}
		speed, err := h.WriteSpeed(s.Dir, WriteProbeBytes)
		rs = append(rs, CheckSlotSaveSpeed(s, speed, err))
	}
	return rs
}

// commonChecks are munge's and Slurm's, on both hosts.
func commonChecks(ctx context.Context, h Host, controller, needAccounts bool, why string) []Result {
	m := GatherMunge(ctx, h)
	s := GatherSlurm(ctx, h, controller)
	rs := []Result{CheckMungeVersion(m), CheckMungeRoundTrip(m), CheckSlurmVersion(s)}
	if controller {
		rs = append(rs, CheckAccounting(s, needAccounts, why))
	}
	return rs
}

// controllerPorts are the ports clients and nodes reach on the
// controller: nginx's, the front door's, the hint listeners'.
func controllerPorts(c Controller, listens []Listen) []Port {
	var ps []Port
	for _, l := range listens {
		ps = append(ps, Port{Addr: l.Addr, Port: l.Port, Proto: "tcp", What: "nginx"})
	}
	for _, a := range []struct{ addr, proto, what string }{
		{c.FrontListen, "tcp", "front door"}, {c.HintListen, "udp", "hints"}, {c.FrontHintListen, "udp", "front door hints"}} {
		host, port, err := net.SplitHostPort(a.addr)
		if p, perr := strconv.Atoi(port); err == nil && perr == nil {
			ps = append(ps, Port{Addr: host, Port: p, Proto: a.proto, What: a.what})
		}
	}
	return ps
}

func listenPorts(ls []Listen) []int {
	var ps []int
	for _, l := range ls {
		ps = append(ps, l.Port)
	}
	return uniq(ps)
}

func uniq(ns []int) []int {
	out := slices.Clone(ns)
	slices.Sort(out)
	return slices.Compact(out)
}

func uniqStrings(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func first(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[0]
}
