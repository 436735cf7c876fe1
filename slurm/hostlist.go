package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts caps how many names one ExpandHostlist call returns. Slurm caps each
// bracket range at 65536 hosts; we cap the whole expansion, so that a hostile or
// mistyped list (a[1-300]b[1-300]) cannot make the caller allocate without bound.
const MaxHosts = 65536

// MaxHostnameLen caps the length of one expanded name (DNS allows 253), which
// with MaxHosts bounds the memory one expansion can take.
const MaxHostnameLen = 255

// ErrBadHostlist is wrapped by every ExpandHostlist error.
var ErrBadHostlist = errors.New("invalid hostlist")

// ExpandHostlist expands a Slurm hostlist ("node[1-3]", "vasp-[01-03]",
// "a[1,3-5],b3", "r[1-2]n[1-2]") into host names, in the order and with the
// duplicates that `scontrol show hostnames` prints. Hostlists are separated by
// commas or whitespace outside brackets; empty items are skipped, so "" gives
// no hosts and no error. A range keeps the zero padding of its first number
// ("[09-11]" gives 09 10 11; "[1-003]" gives 1 2 3).
//
// It is stricter than scontrol where scontrol prints nonsense: unbalanced or
// nested brackets, text after the last bracket ("a[1]b", which scontrol also
// rejects), non-digits in a range, "1-", reversed ranges and more than MaxHosts
// names are errors wrapping ErrBadHostlist.
func ExpandHostlist(s string) ([]string, error) {
	items, err := splitHostlist(s)
	if err != nil {
		return nil, fmt.Errorf("expand hostlist %q: %w", s, err)
	}
	var hosts []string
	for _, item := range items {
		names, err := expandItem(item, MaxHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("expand hostlist %q: %w", s, err)
		}
		hosts = append(hosts, names...)
	}
	return hosts, nil
}

// splitHostlist splits s at commas and whitespace that are outside brackets.
func splitHostlist(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '[':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("%w: nested '[' at offset %d", ErrBadHostlist, i)
			}
		case c == ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("%w: ']' without '[' at offset %d", ErrBadHostlist, i)
			}
		case depth == 0 && (c == ',' || isSpace(c)):
			if i > start {
				items = append(items, s[start:i])
			}
			start = i + 1
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%w: '[' without ']'", ErrBadHostlist)
	}
	if start < len(s) {
		items = append(items, s[start:])
	}
	return items, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// expandItem expands one hostlist item without top-level separators, such as
// "r[1-2]n[1-2]", into at most limit names. Each bracket group multiplies the
// names so far, the first group varying slowest, as scontrol does.
func expandItem(item string, limit int) ([]string, error) {
	names := []string{""}
	rest := item
	for {
		open := strings.IndexByte(rest, '[')
		if open < 0 {
			break
		}
		end := strings.IndexByte(rest, ']') // splitHostlist checked balance and nesting
		prefix, ranges := rest[:open], rest[open+1:end]
		suffixes, err := expandRanges(ranges, limit)
		if err != nil {
			return nil, err
		}
		if len(names)*len(suffixes) > limit {
			return nil, fmt.Errorf("%w: more than %d hosts", ErrBadHostlist, MaxHosts)
		}
		names = crossJoin(names, prefix, suffixes)
		rest = rest[end+1:]
	}
	if rest != "" {
		// Text after the last group goes after every name, as Slurm 24.11
		// expands it ("gpu[01-02]-ib": gpu01-ib gpu02-ib; 22.05 refused it,
		// and Slurm never gave such a list to a job there).
		names = crossJoin(names, rest, []string{""})
	}
	if len(names) > limit {
		return nil, fmt.Errorf("%w: more than %d hosts", ErrBadHostlist, MaxHosts)
	}
	for _, n := range names {
		if len(n) > MaxHostnameLen {
			return nil, fmt.Errorf("%w: host name of %d bytes is longer than %d", ErrBadHostlist, len(n), MaxHostnameLen)
		}
	}
	return names, nil
}

// crossJoin returns every name followed by prefix and each suffix, in order.
func crossJoin(names []string, prefix string, suffixes []string) []string {
	out := make([]string, 0, len(names)*len(suffixes))
	for _, n := range names {
		for _, s := range suffixes {
			out = append(out, n+prefix+s)
		}
	}
	return out
}

// expandRanges expands the inside of one bracket group ("1,3-5") into at most
// limit numbers, formatted with the padding of each range's first number.
func expandRanges(s string, limit int) ([]string, error) {
	var out []string
	for _, r := range strings.Split(s, ",") {
		lo, hi, width, err := parseRange(r)
		if err != nil {
			return nil, err
		}
		if hi-lo >= uint64(limit-len(out)) {
			return nil, fmt.Errorf("%w: more than %d hosts", ErrBadHostlist, MaxHosts)
		}
		for n := lo; n <= hi; n++ {
			out = append(out, fmt.Sprintf("%0*d", width, n))
		}
	}
	return out, nil
}

// parseRange parses "N" or "N-M" (digits only, N <= M). The width is the
// number of digits written for N, which is the zero padding scontrol keeps.
func parseRange(r string) (lo, hi uint64, width int, err error) {
	loS, hiS, isRange := strings.Cut(r, "-")
	if !isRange {
		hiS = loS
	}
	if lo, err = parseNumber(loS); err != nil {
		return 0, 0, 0, fmt.Errorf("%w: range %q: %w", ErrBadHostlist, r, err)
	}
	if hi, err = parseNumber(hiS); err != nil {
		return 0, 0, 0, fmt.Errorf("%w: range %q: %w", ErrBadHostlist, r, err)
	}
	if hi < lo {
		return 0, 0, 0, fmt.Errorf("%w: range %q is reversed", ErrBadHostlist, r)
	}
	return lo, hi, len(loS), nil
}

// maxDigits bounds a range number and its zero padding; 18 digits fit uint64.
const maxDigits = 18

func parseNumber(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty number")
	}
	if len(s) > maxDigits {
		return 0, fmt.Errorf("number %q has more than %d digits", s, maxDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}
