// Package cli holds what the programs' command lines share.
package cli

import (
	"bytes"
	"flag"
	"io"
	"strings"
)

// PrintFlags writes fs's flags as flag.PrintDefaults does, but each named
// with two dashes, as the usage lines and the docs write them (Go's flag
// package takes one or two).
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	var b bytes.Buffer
	old := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(old)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if strings.HasPrefix(line, "  -") {
			line = "  --" + line[len("  -"):]
		}
		io.WriteString(w, line)
	}
}

// FlagNames are fs's flags, each with two dashes, in flag.VisitAll's
// order (sorted).
func FlagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	return out
}
