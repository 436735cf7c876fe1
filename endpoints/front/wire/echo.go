package wire

import "unicode/utf8"

// maxEcho bounds what of another's input (a client's model name, path or
// header; a head's line) the front door repeats in an answer or a log
// line.
const maxEcho = 128

// Echo is s cut to 128 bytes (at a rune boundary, "…" marking the cut),
// for quoting input the front door did not write.
func Echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
