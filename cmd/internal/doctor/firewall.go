package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Firewall is what firewalld (its default zone) or nftables said.
type Firewall struct {
	// Firewalld is firewall-cmd --state: "running", "not running", or ""
	// when firewalld is not installed.
	Firewalld string
	// Zone is the default zone and ZoneAll its --list-all (firewalld
	// running only). Interfaces bound to other zones are not looked at.
	Zone, ZoneAll string
	// Nft is nft list ruleset (firewalld's tables too when it runs: the
	// rpc-server check reads an output rule there); NftErr why it could
	// not be read, NftMissing when nft is not installed.
	Nft, NftErr string
	NftMissing  bool
}

// Port is one port a program listens on, and what it is for (message).
type Port struct {
	Addr  string // "" or "0.0.0.0": every address
	Port  int
	Proto string // "tcp", "udp"
	What  string
}

// String is the port as the report names it: "8080/tcp (nginx)".
func (p Port) String() string { return fmt.Sprintf("%d/%s (%s)", p.Port, p.Proto, p.What) }

// loopback reports whether p listens on a loopback address only.
func (p Port) loopback() bool {
	if p.Addr == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(p.Addr)
	return err == nil && a.IsLoopback()
}

// GatherFirewall asks firewalld and nft.
func GatherFirewall(ctx context.Context, h Host) Firewall {
	var f Firewall
	if s := h.Run(ctx, Cmd{Name: "firewall-cmd", Args: []string{"--state"}}); !s.Missing {
		f.Firewalld = firstLine(s.Text())
	}
	if f.Firewalld == "running" {
		f.Zone = firstLine(h.Run(ctx, Cmd{Name: "firewall-cmd", Args: []string{"--get-default-zone"}}).Stdout)
		f.ZoneAll = h.Run(ctx, Cmd{Name: "firewall-cmd", Args: []string{"--list-all"}}).Stdout
	}
	n := h.Run(ctx, Cmd{Name: "nft", Args: []string{"list", "ruleset"}})
	switch {
	case n.Missing:
		f.NftMissing = true
	case n.Err != nil:
		f.NftErr = firstLine(n.Text())
	default:
		f.Nft = n.Stdout
	}
	return f
}

// zone is the part of firewall-cmd --list-all that decides a port.
type zone struct {
	target string
	ports  []string // "8080/tcp", "9000-9010/tcp"
	rich   []string
}

func parseZone(text string) zone {
	var z zone
	inRich := false
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		key, val, _ := strings.Cut(t, ":")
		switch {
		case inRich && strings.HasPrefix(t, "rule "):
			z.rich = append(z.rich, t)
		case key == "target":
			z.target = strings.TrimSpace(val)
		case key == "ports":
			z.ports = strings.Fields(val)
		case key == "rich rules":
			inRich = true
		}
	}
	return z
}

// opens reports whether a "ports:" entry covers p.
func (z zone) opens(p Port) bool {
	for _, e := range z.ports {
		rng, proto, _ := strings.Cut(e, "/")
		lo, hi, isRange := strings.Cut(rng, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && proto == p.Proto && a <= p.Port && p.Port <= b {
			return true
		}
	}
	return false
}

// richSource is the source address of an accepting rich rule for p
// ("" when there is none; "any" for a rule without a source).
func (z zone) richSource(p Port) string {
	want := fmt.Sprintf(`port="%d" protocol="%s"`, p.Port, p.Proto)
	for _, r := range z.rich {
		if !strings.Contains(r, want) || !strings.HasSuffix(r, "accept") {
			continue
		}
		if m := richSourceRe.FindStringSubmatch(r); m != nil {
			return m[1]
		}
		return "any"
	}
	return ""
}

var richSourceRe = regexp.MustCompile(`source address="([^"]+)"`)

// nftFiltersInput reports whether the ruleset has a chain on the input
// hook (anything else accepts every packet to this host).
func nftFiltersInput(ruleset string) bool { return strings.Contains(ruleset, "hook input") }

// CheckFirewallOpen checks that the ports clients and nodes reach (nginx,
// the front door, the hint listener) are open, unless they listen on
// loopback only (the shipped sites: tailscale serve reaches them there).
func CheckFirewallOpen(f Firewall, ports []Port) Result {
	const c = "firewall.ports"
	var exposed []Port
	for _, p := range ports {
		if !p.loopback() {
			exposed = append(exposed, p)
		}
	}
	if len(exposed) == 0 {
		return ok(c, "every port listens on loopback only: no rule needed (tailscale serve reaches them)")
	}
	switch {
	case f.Firewalld == "running":
		z := parseZone(f.ZoneAll)
		var closed, fixes []string
		for _, p := range exposed {
			if z.target != "ACCEPT" && !z.opens(p) && z.richSource(p) == "" {
				closed = append(closed, p.String())
				fixes = append(fixes, fmt.Sprintf("firewall-cmd --permanent --add-port=%d/%s", p.Port, p.Proto))
			}
		}
		if len(closed) == 0 {
			return ok(c, fmt.Sprintf("open in firewalld zone %s: %s", f.Zone, portList(exposed)))
		}
		return fail(c, fmt.Sprintf("closed in firewalld zone %s: %s", f.Zone, strings.Join(closed, ", ")),
			strings.Join(append(fixes, "firewall-cmd --reload"), " && "))
	case f.Nft != "" && nftFiltersInput(f.Nft):
		return warn(c, "unknown: nftables filters input and whether it accepts "+portList(exposed)+" is not decided here",
			fmt.Sprintf("nft list ruleset | grep -w -e %s (accept: nft add rule inet filter input tcp dport %d accept)", ports2grep(exposed), exposed[0].Port))
	case f.NftErr != "":
		return warn(c, "unknown: nft list ruleset failed: "+f.NftErr, "as root: nft list ruleset")
	}
	return ok(c, "no input filter ("+f.noFilter()+"): "+portList(exposed)+" open")
}

// CheckRPCExposure checks who may reach a node's rpc-server ports:
// rpc-server has no authentication, so whoever reaches the port drives
// the GPU. The head on another node must reach them; nobody else should:
// no host outside the cluster (firewalld's default zone, or an nftables
// input rule) and no other user on the cluster's nodes (an nftables
// output rule on the user: README, "A hostile cluster user"). What
// cannot be decided here is "unknown", never a pass.
func CheckRPCExposure(f Firewall, ports []Port) Result {
	const c = "firewall.rpc"
	if len(ports) == 0 {
		return ok(c, "no rpc-server ports (a single-node tier)")
	}
	in := rpcInput(f, ports)
	if in.status != OK {
		return Result{Check: c, Status: in.status, What: in.what, Fix: in.fix}
	}
	chains := parseNft(f.Nft)
	var users []string
	for _, p := range ports {
		u := nftOutputUser(chains, p.Port)
		if u == "" {
			return warn(c, in.what+"; but any user on the nodes may connect to "+p.String()+" (no nftables output rule on the user)",
				fmt.Sprintf(`nft add table inet slurm_llm_rpc; nft add chain inet slurm_llm_rpc output '{ type filter hook output priority 0; policy accept; }'; nft add rule inet slurm_llm_rpc output tcp dport %d meta skuid != "slurm-llm" reject with tcp reset (on every node; README, A hostile cluster user)`, p.Port))
		}
		users = append(users, u)
	}
	return ok(c, in.what+"; on the nodes only "+strings.Join(uniqStrings(users), ", ")+" may connect (root still can)")
}

// inputVerdict is what the input side decided: OK with what limits it,
// or why not and the fix.
type inputVerdict struct {
	status    Status
	what, fix string
}

// rpcInput decides who outside this node reaches the ports: firewalld's
// default zone when it runs, else nftables' input hook.
func rpcInput(f Firewall, ports []Port) inputVerdict {
	list := portList(ports)
	rich := fmt.Sprintf("firewall-cmd --permanent --add-rich-rule='rule family=ipv4 source address=NODES_CIDR port port=%d protocol=tcp accept' && firewall-cmd --reload", ports[0].Port)
	nftFix := fmt.Sprintf("nft add rule inet slurm_llm_rpc input tcp dport %d ip saddr != NODES_CIDR drop (README, A hostile cluster user)", ports[0].Port)
	if f.Firewalld == "running" {
		return rpcFirewalld(parseZone(f.ZoneAll), f.Zone, ports, rich)
	}
	chains := parseNft(f.Nft)
	var limited []string
	for _, p := range ports {
		src := nftInputSource(chains, p.Port)
		if src == "" {
			limited = nil
			break
		}
		limited = append(limited, fmt.Sprintf("%d from %s", p.Port, src))
	}
	switch {
	case len(limited) > 0:
		return inputVerdict{OK, "nftables drops other sources: " + strings.Join(limited, ", "), ""}
	case f.Nft != "" && nftFiltersInput(f.Nft):
		return inputVerdict{Warn, "unknown: nftables filters input, but no rule limits " + list + " to a source", nftFix}
	case f.NftErr != "":
		return inputVerdict{Warn, "unknown: nft list ruleset failed: " + f.NftErr, "as root: nft list ruleset"}
	}
	return inputVerdict{Warn, "no input filter (" + f.noFilter() + "): " + list + " open to every host that reaches this node (rpc-server has no authentication)",
		"firewalld: " + rich + "; or nftables: " + nftFix}
}

// noFilter says why no rule filters input: what was (not) found.
func (f Firewall) noFilter() string {
	fw := "firewalld not installed"
	if f.Firewalld != "" {
		fw = "firewalld " + f.Firewalld
	}
	nft := "no nftables input chain"
	if f.NftMissing {
		nft = "nft not installed"
	}
	return fw + ", " + nft
}

func rpcFirewalld(z zone, name string, ports []Port, rich string) inputVerdict {
	if z.target == "ACCEPT" {
		return inputVerdict{Warn, fmt.Sprintf("firewalld zone %s accepts everything: %s open to every host", name, portList(ports)),
			"firewall-cmd --permanent --zone=" + name + " --set-target=default && " + rich}
	}
	var open, closed, limited []string
	for _, p := range ports {
		switch src := z.richSource(p); {
		case z.opens(p) || src == "any":
			open = append(open, p.String())
		case src != "":
			limited = append(limited, fmt.Sprintf("%d from %s", p.Port, src))
		default:
			closed = append(closed, p.String())
		}
	}
	switch {
	case len(open) > 0:
		return inputVerdict{Warn, fmt.Sprintf("open to every source in firewalld zone %s: %s (rpc-server has no authentication)", name, strings.Join(open, ", ")),
			fmt.Sprintf("firewall-cmd --permanent --remove-port=%d/tcp && %s", ports[0].Port, rich)}
	case len(closed) > 0:
		return inputVerdict{Warn, fmt.Sprintf("closed in firewalld zone %s: %s: a head on another node cannot reach them unless another zone admits it", name, strings.Join(closed, ", ")), rich}
	}
	return inputVerdict{OK, fmt.Sprintf("firewalld zone %s admits only the rule's sources: %s", name, strings.Join(limited, ", ")), ""}
}

func portList(ps []Port) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func ports2grep(ps []Port) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p.Port)
	}
	return strings.Join(s, " -e ")
}
