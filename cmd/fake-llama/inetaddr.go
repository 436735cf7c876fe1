package main

import "strings"

// inetAddr parses host the way glibc's inet_addr(3) does, which is all real
// ggml-rpc-server accepts for -H: an IPv4 numbers-and-dots literal (1 to 4
// parts, each decimal, 0x hex or 0 octal, the last part filling the remaining
// bytes), optionally followed by white space and anything. A name, an IPv6
// literal and 255.255.255.255 (INADDR_NONE, inet_addr's error value) are
// rejected: ok is false.
func inetAddr(host string) (ip [4]byte, ok bool) {
	var parts []uint64
	rest := host
	for {
		v, after, ok := cNumber(rest)
		if !ok {
			return ip, false
		}
		parts, rest = append(parts, v), after
		if rest == "" || rest[0] != '.' {
			break
		}
		if v > 0xff || len(parts) == 4 {
			return ip, false
		}
		rest = rest[1:]
	}
	if rest != "" && !strings.ContainsRune(" \t\n\v\f\r", rune(rest[0])) {
		return ip, false
	}
	last := parts[len(parts)-1]
	if last > 0xffffffff>>(8*(len(parts)-1)) {
		return ip, false
	}
	val := last
	for i, p := range parts[:len(parts)-1] {
		val |= p << (8 * (3 - i))
	}
	if val == 0xffffffff {
		return ip, false
	}
	return [4]byte{byte(val >> 24), byte(val >> 16), byte(val >> 8), byte(val)}, true
}

// cNumber reads an unsigned number at the start of s as strtoul(s, &end, 0)
// does after inet_aton's check that s starts with a digit: 0x/0X hex, a
// leading 0 octal, else decimal. It returns the value and what follows it;
// ok is false when s does not start with a digit or the value overflows.
func cNumber(s string) (v uint64, rest string, ok bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, s, false
	}
	base, i := uint64(10), 0
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && digitValue(s[2]) < 16:
		base, i = 16, 2
	case s[0] == '0':
		base = 8
	}
	for ; i < len(s); i++ {
		d := digitValue(s[i])
		if d >= base {
			break
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, s, false
		}
	}
	return v, s[i:], true
}

// digitValue is the value of a hex digit, or 99 for any other byte.
func digitValue(c byte) uint64 {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0')
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return uint64(c-'A') + 10
	}
	return 99
}
