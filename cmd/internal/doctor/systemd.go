package doctor

import (
	"context"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Systemd is systemd's version and the slurm-llm units installed here.
type Systemd struct {
	Missing bool
	Version int
	Units   []Unit
}

// Unit is one installed unit: the directives it sets and, when
// systemd-analyze verify ran, those this systemd does not know.
type Unit struct {
	Name, Path string
	Directives []string
	// Verified: Unknown is systemd-analyze verify's answer (the host's
	// own parser: a distribution's backports count); otherwise the
	// version table decides.
	Verified bool
	Unknown  []string
}

// Units are the controller's units, in the report's order.
var Units = []string{"llm-front.service", "llm-keeper.service", "llm-upstreams-watch.service",
	"llm-upstreams.service", "llm-upstreams.timer"}

// UnitDirs are where an install puts them: make install (UNITDIR), the
// packages (RHEL's and Debian's system unit directories).
var UnitDirs = []string{"/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// Introduced is the systemd version that added each sandboxing directive
// the shipped units use after 239 (RHEL 8's), from systemd's NEWS
// ("CHANGES WITH 242": ProtectHostname=, RestrictSUIDSGID=; 244:
// ProtectKernelLogs=; 245: ProtectClock=; 247: ProtectProc=,
// ProcSubset=). Every other directive they use is in 239
// (TestShippedUnitsKnown). Distributions backport: RHEL 8's 239 has
// RestrictSUIDSGID=, which is why systemd-analyze verify is asked first.
var Introduced = map[string]int{
	"ProtectHostname":   242,
	"RestrictSUIDSGID":  242,
	"ProtectKernelLogs": 244,
	"ProtectClock":      245,
	"ProtectProc":       247,
	"ProcSubset":        247,
}

// GatherSystemd asks systemctl its version, reads the installed units
// and has systemd-analyze verify each.
func GatherSystemd(ctx context.Context, h Host) Systemd {
	v := h.Run(ctx, Cmd{Name: "systemctl", Args: []string{"--version"}})
	if v.Missing {
		return Systemd{Missing: true}
	}
	s := Systemd{Version: systemdVersion(v.Stdout)}
	for _, name := range Units {
		for _, dir := range UnitDirs {
			p := path.Join(dir, name)
			b, err := h.ReadFile(p)
			if err != nil {
				continue
			}
			u := Unit{Name: name, Path: p, Directives: unitDirectives(string(b))}
			u.Unknown, u.Verified = verify(ctx, h, p)
			s.Units = append(s.Units, u)
			break
		}
	}
	return s
}

// verify runs systemd-analyze verify on a unit: ok is false when it did
// not run or failed before it read the unit (its messages name the unit's
// path when it read it), so that no answer is not taken for "all known".
func verify(ctx context.Context, h Host, unit string) (unknown []string, ok bool) {
	out := h.Run(ctx, Cmd{Name: "systemd-analyze", Args: []string{"verify", unit}})
	if out.Missing {
		return nil, false
	}
	text := out.Text()
	unknown = unknownKeys(text)
	return unknown, out.Err == nil || len(unknown) > 0 || strings.Contains(text, path.Base(unit))
}

// systemdVersion reads "systemd 239 (239-82.el8)"; 0 when it cannot.
func systemdVersion(out string) int {
	f := strings.Fields(firstLine(out))
	if len(f) < 2 || f[0] != "systemd" {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// unitDirectives are the keys a unit file sets, sorted, each once.
func unitDirectives(text string) []string {
	var keys []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		if k, _, found := strings.Cut(line, "="); found {
			keys = append(keys, strings.TrimSpace(k))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// unknownKey matches systemd's warning for a directive it does not know:
// 239 "Unknown lvalue 'X' in section 'Service'", later "Unknown key name
// 'X' in section 'Service', ignoring." and 252 "Unknown key 'X' in
// section [Service], ignoring."
var unknownKey = regexp.MustCompile(`Unknown (?:lvalue|key name|key) '([^']+)' in section`)

func unknownKeys(out string) []string {
	var keys []string
	for _, m := range unknownKey.FindAllStringSubmatch(out, -1) {
		keys = append(keys, m[1])
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// ignored are the directives of u this systemd does not enforce.
func (s Systemd) ignored(u Unit) []string {
	if u.Verified {
		return u.Unknown
	}
	var out []string
	for _, d := range u.Directives {
		if v, found := Introduced[d]; found && s.Version < v {
			out = append(out, d)
		}
	}
	return out
}

// CheckSystemd says which directives of the installed units this
// systemd ignores (it warns and runs the unit without them): the
// protections an RHEL 8 host does not get.
func CheckSystemd(s Systemd) Result {
	const c = "systemd.units"
	switch {
	case s.Missing:
		return warn(c, "systemd not found: the units cannot run here", "run the controller's services under systemd")
	case len(s.Units) == 0:
		return warn(c, fmt.Sprintf("systemd %d; no slurm-llm unit installed in %s", s.Version, strings.Join(UnitDirs, ", ")),
			"install the package (or make install), then systemctl daemon-reload")
	}
	byDirective := map[string][]string{}
	how := "by systemd-analyze verify"
	for _, u := range s.Units {
		if !u.Verified {
			how = "by systemd's NEWS for this version (distributions backport some; systemd-analyze verify UNIT says for sure)"
		}
		for _, d := range s.ignored(u) {
			byDirective[d] = append(byDirective[d], u.Name)
		}
	}
	if len(byDirective) == 0 {
		return ok(c, fmt.Sprintf("systemd %d knows every directive of the %d installed units", s.Version, len(s.Units)))
	}
	var parts []string
	for _, d := range slices.Sorted(maps.Keys(byDirective)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", d, strings.Join(byDirective[d], ", ")))
	}
	return warn(c, fmt.Sprintf("systemd %d ignores, so does not enforce: %s; found %s", s.Version, strings.Join(parts, "; "), how),
		"nothing needed to run; those protections need a newer systemd (RHEL 9: 252)")
}
