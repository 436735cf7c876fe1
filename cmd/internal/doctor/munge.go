package doctor

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Munge is munge's version and one credential's round trip (munge -n
// piped to unmunge, no shell: the credential is passed on by the doctor).
type Munge struct {
	Missing bool
	// Version is munge --version's ("munge-0.5.13 (2017-09-26)").
	Version string
	// Encode and Decode are munge -n's and unmunge's errors and messages;
	// Decode is empty when Encode failed.
	EncodeErr, Encode string
	DecodeErr, Decode string
}

// GatherMunge asks munge its version and round-trips one credential.
func GatherMunge(ctx context.Context, h Host) Munge {
	v := h.Run(ctx, Cmd{Name: "munge", Args: []string{"--version"}})
	if v.Missing {
		return Munge{Missing: true}
	}
	m := Munge{Version: firstLine(v.Text())}
	e := h.Run(ctx, Cmd{Name: "munge", Args: []string{"-n"}})
	m.Encode = e.Text()
	if e.Err != nil {
		m.EncodeErr = e.Err.Error()
		return m
	}
	d := h.Run(ctx, Cmd{Name: "unmunge", Stdin: e.Stdout})
	m.Decode = d.Text()
	if d.Err != nil {
		m.DecodeErr = d.Err.Error()
	}
	return m
}

var versionRe = regexp.MustCompile(`(\d+)\.(\d+)\.(\d+)`)

// version3 is the first a.b.c in s as three numbers.
func version3(s string) ([3]int, bool) {
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return [3]int{}, false
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, true
}

// oldestMunge is the oldest munge checked: RHEL 8's 0.5.13, whose
// unmunge has no --numeric (issue 34).
var oldestMunge = [3]int{0, 5, 13}

// CheckMungeVersion says which munge this is.
func CheckMungeVersion(m Munge) Result {
	const c = "munge.version"
	if m.Missing {
		return fail(c, "munge is not installed: keys (llm-upstreams key) and Slurm need it",
			"dnf install munge (RHEL) / apt-get install munge; the cluster's /etc/munge/munge.key, then systemctl enable --now munge")
	}
	v, found := version3(m.Version)
	switch {
	case !found:
		return warn(c, fmt.Sprintf("munge --version said %q", m.Version), "munge --version")
	case lessVersion(v, oldestMunge):
		return warn(c, m.Version+": older than 0.5.13, the oldest checked", "upgrade munge to 0.5.13 or later")
	}
	return ok(c, fmt.Sprintf("munge %d.%d.%d (0.5.13 and later supported)", v[0], v[1], v[2]))
}

func lessVersion(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// CheckMungeRoundTrip checks that munged makes a credential and that it
// decodes: munged is up and its key readable.
func CheckMungeRoundTrip(m Munge) Result {
	const c = "munge.credential"
	switch {
	case m.Missing:
		return fail(c, "no munge", "install munge first")
	case m.EncodeErr != "":
		return fail(c, "munge -n failed, munged is not running or its socket is not reachable: "+firstLine(m.Encode+"; "+m.EncodeErr),
			"systemctl enable --now munge; systemctl status munge")
	case m.DecodeErr != "" || !strings.Contains(m.Decode, "Success"):
		return fail(c, "unmunge refused a fresh credential: "+firstLine(strings.TrimSpace(m.Decode+" "+m.DecodeErr)),
			"check /etc/munge/munge.key (owner munge, mode 0400, the same on every node) and the clock, then systemctl restart munge")
	}
	return ok(c, "a credential round-trips (munge -n | unmunge)")
}
