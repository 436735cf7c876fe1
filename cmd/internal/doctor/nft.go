package doctor

import (
	"regexp"
	"strconv"
	"strings"
)

// nftChain is one chain of nft list ruleset: the hook of a base chain
// ("input", "output"; "" for a regular chain), its policy and its rules.
type nftChain struct {
	hook, policy string
	rules        []string
}

var nftHook = regexp.MustCompile(`hook (\w+) .*policy (\w+)`)

// parseNft splits a ruleset into chains (nft prints one rule a line, a
// set inline: "tcp dport { 50052, 50053 } drop").
func parseNft(ruleset string) []nftChain {
	var chains []nftChain
	var cur *nftChain
	for _, line := range strings.Split(ruleset, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "chain ") && strings.HasSuffix(t, "{"):
			chains = append(chains, nftChain{})
			cur = &chains[len(chains)-1]
		case cur == nil || t == "":
		case t == "}":
			cur = nil
		case strings.HasPrefix(t, "type "):
			if m := nftHook.FindStringSubmatch(t); m != nil {
				cur.hook, cur.policy = m[1], m[2]
			}
		default:
			cur.rules = append(cur.rules, t)
		}
	}
	return chains
}

var nftDport = regexp.MustCompile(`dport (\{[^}]*\}|\d+(?:-\d+)?)`)

// nftPortMatch reports whether rule matches TCP port by its dport (a
// port, a range, or a set of them).
func nftPortMatch(rule string, port int) bool {
	m := nftDport.FindStringSubmatch(rule)
	if m == nil || strings.Contains(rule, "udp dport") {
		return false
	}
	for _, e := range strings.Split(strings.Trim(m[1], "{}"), ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(e), "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= port && port <= b {
			return true
		}
	}
	return false
}

var (
	nftSaddrNot = regexp.MustCompile(`saddr != (\S+)`)
	nftSaddr    = regexp.MustCompile(`saddr (\S+)`)
	nftSkuidNot = regexp.MustCompile(`skuid != (\S+)`)
)

func nftDrops(rule string) bool {
	return strings.HasSuffix(rule, " drop") || strings.Contains(rule, " reject")
}

// nftInputSource is the source the input hook limits port to: a rule
// dropping every other source ("tcp dport 50052 ip saddr != 10.77.0.0/16
// drop", README's), or, under policy drop, one accepting only a source.
// A drop is final in every base chain, so one such rule is enough.
func nftInputSource(chains []nftChain, port int) string {
	for _, c := range chains {
		if c.hook != "input" {
			continue
		}
		for _, r := range c.rules {
			if !nftPortMatch(r, port) {
				continue
			}
			if m := nftSaddrNot.FindStringSubmatch(r); m != nil && nftDrops(r) {
				return m[1]
			}
			if m := nftSaddr.FindStringSubmatch(r); m != nil && c.policy == "drop" && strings.HasSuffix(r, " accept") {
				return m[1]
			}
		}
	}
	return ""
}

// nftOutputUser is the account the output hook leaves port to: a rule
// rejecting every other user's connections ("meta skuid != "slurm-llm"
// reject", README's), so that other users on this node cannot drive
// rpc-server; "" when there is none.
func nftOutputUser(chains []nftChain, port int) string {
	for _, c := range chains {
		if c.hook != "output" {
			continue
		}
		for _, r := range c.rules {
			if m := nftSkuidNot.FindStringSubmatch(r); m != nil && nftPortMatch(r, port) && nftDrops(r) {
				u := strings.Trim(m[1], `"`)
				if _, err := strconv.Atoi(u); err == nil {
					u = "uid " + u // nft prints the number it resolved the name to
				}
				return u
			}
		}
	}
	return ""
}
