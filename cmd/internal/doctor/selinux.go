package doctor

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SELinux is what getenforce, getsebool and semanage said.
type SELinux struct {
	// Mode is getenforce's answer: "Enforcing", "Permissive", "Disabled",
	// or "" when SELinux is not installed (no getenforce).
	Mode string
	// NetworkConnect is httpd_can_network_connect: "on", "off", or ""
	// when getsebool could not say.
	NetworkConnect string
	// PortTypes maps a TCP port to the types semanage labels it with
	// (a local change lists a port under two); nil when semanage is not
	// installed or failed (PortsErr says which).
	PortTypes map[int][]string
	PortsErr  string
}

// GatherSELinux asks getenforce, getsebool and `semanage port -l`.
func GatherSELinux(ctx context.Context, h Host) SELinux {
	var s SELinux
	out := h.Run(ctx, Cmd{Name: "getenforce"})
	if out.Missing {
		return s
	}
	s.Mode = strings.TrimSpace(out.Stdout)
	if s.Mode == "" || s.Mode == "Disabled" {
		return s
	}
	b := h.Run(ctx, Cmd{Name: "getsebool", Args: []string{"httpd_can_network_connect"}})
	if _, v, found := strings.Cut(b.Stdout, "-->"); found && b.Err == nil {
		s.NetworkConnect = strings.TrimSpace(v)
	}
	p := h.Run(ctx, Cmd{Name: "semanage", Args: []string{"port", "-l"}})
	switch {
	case p.Missing:
		s.PortsErr = "semanage is not installed"
	case p.Err != nil:
		s.PortsErr = firstLine(p.Text())
	default:
		s.PortTypes = parseSemanagePorts(p.Stdout)
	}
	return s
}

// parseSemanagePorts reads `semanage port -l`: "TYPE  PROTO  80, 81,
// 8000-8010" per line; only TCP is kept.
func parseSemanagePorts(text string) map[int][]string {
	ports := map[int][]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "tcp" {
			continue
		}
		for _, item := range strings.Split(strings.Join(f[2:], ""), ",") {
			lo, hi, isRange := strings.Cut(item, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !isRange {
				b, err2 = a, err1
			}
			if err1 != nil || err2 != nil || b < a || b-a > 65535 {
				continue
			}
			for p := a; p <= b; p++ {
				ports[p] = append(ports[p], f[0])
			}
		}
	}
	return ports
}

// enforced is how much an SELinux denial matters here: Fail when
// enforcing, Warn when permissive (logged only), and not at all (false)
// when SELinux is off.
func (s SELinux) enforced() (Status, bool) {
	switch s.Mode {
	case "Enforcing":
		return Fail, true
	case "Permissive":
		return Warn, true
	default:
		return OK, false
	}
}

// CheckSELinuxMode says which mode SELinux is in.
func CheckSELinuxMode(s SELinux) Result {
	const c = "selinux.mode"
	switch s.Mode {
	case "":
		return ok(c, "not installed (no getenforce): nothing to label")
	case "Enforcing", "Disabled":
		return ok(c, strings.ToLower(s.Mode))
	case "Permissive":
		return warn(c, "permissive: denials are logged, not enforced; the selinux lines below say what enforcing would deny",
			"fix those lines before `setenforce 1`")
	default:
		return warn(c, fmt.Sprintf("getenforce said %q", s.Mode), "getenforce; sestatus")
	}
}

// CheckSELinuxBoolean checks httpd_can_network_connect: without it nginx
// (httpd_t) may not connect to the front door (127.0.0.1:8090) nor to the
// heads on the nodes, and users see 502s and "13: Permission denied" in
// nginx's error log.
func CheckSELinuxBoolean(s SELinux) Result {
	const c = "selinux.boolean"
	sev, on := s.enforced()
	switch {
	case !on:
		return ok(c, "httpd_can_network_connect: not needed (SELinux off)")
	case s.NetworkConnect == "on":
		return ok(c, "httpd_can_network_connect is on")
	case s.NetworkConnect == "":
		return warn(c, "httpd_can_network_connect: unknown (getsebool did not answer)", "getsebool httpd_can_network_connect")
	}
	return Result{Check: c, Status: sev,
		What: "httpd_can_network_connect is off: nginx may not connect to the front door or the nodes' heads (502, \"13: Permission denied\")",
		Fix:  "setsebool -P httpd_can_network_connect 1"}
}

// CheckSELinuxPorts checks that nginx's ports are http_port_t: httpd_t
// may bind no other (8080 is http_cache_port_t in RHEL's policy, which is
// why its fix is -m, not -a).
func CheckSELinuxPorts(s SELinux, ports []int) Result {
	const c = "selinux.ports"
	sev, on := s.enforced()
	if !on {
		return ok(c, "port labels: not needed (SELinux off)")
	}
	if s.PortTypes == nil {
		return warn(c, "port labels unknown: "+s.PortsErr,
			"dnf install policycoreutils-python-utils; semanage port -l | grep -w http_port_t")
	}
	var bad, fixes []string
	for _, p := range ports {
		types := s.PortTypes[p]
		if slices.Contains(types, "http_port_t") {
			continue
		}
		flag := "-a"
		if len(types) > 0 {
			flag = "-m" // -a refuses a port the policy already labels
			bad = append(bad, fmt.Sprintf("%d (%s)", p, strings.Join(types, ",")))
		} else {
			bad = append(bad, fmt.Sprintf("%d (unlabelled)", p))
		}
		fixes = append(fixes, fmt.Sprintf("semanage port %s -t http_port_t -p tcp %d", flag, p))
	}
	if len(bad) == 0 {
		return ok(c, "nginx's ports are http_port_t: "+joinInts(ports))
	}
	return Result{Check: c, Status: sev,
		What: "not http_port_t, so nginx may not listen there: " + strings.Join(bad, ", "),
		Fix:  strings.Join(fixes, " && ")}
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// firstLine is s's first non-empty line, cut at 200 bytes (a message,
// not a dump).
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 200 {
				l = l[:200] + "…"
			}
			return l
		}
	}
	return ""
}
