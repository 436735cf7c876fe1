// Package doctor checks what an install of slurm-llm needs on one host (the
// controller or a GPU node) and says, for each miss, the command that fixes
// it: `llm-upstreams doctor` and `llm-supervisor doctor` (issue 34). Each
// check is a pure function of facts gathered beforehand (facts.go's Gather
// functions, through a Host whose commands and files tests replace), so
// every decision is table-tested without the host.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Status is how one check came out. The zero value is OK.
type Status int

const (
	// OK: nothing to do.
	OK Status = iota
	// Warn: works, but something is weaker than it could be or could not
	// be decided here ("unknown"); the fix says how to look.
	Warn
	// Fail: the install will not work (or is unsafe) until fixed.
	Fail
)

// String is the word printed in the first column.
func (s Status) String() string {
	switch s {
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	default:
		return "ok"
	}
}

// MarshalText writes the status as its word, for --json.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Result is one line of the report: which check, how it came out, what
// was seen and, unless OK, the fix (a command where there is one).
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	What   string `json:"what"`
	Fix    string `json:"fix,omitempty"`
}

func ok(check, what string) Result { return Result{Check: check, Status: OK, What: what} }

func warn(check, what, fix string) Result {
	return Result{Check: check, Status: Warn, What: what, Fix: fix}
}

func fail(check, what, fix string) Result {
	return Result{Check: check, Status: Fail, What: what, Fix: fix}
}

// Ready reports whether no check failed (warnings do not stop an install).
func Ready(rs []Result) bool {
	return !slices.ContainsFunc(rs, func(r Result) bool { return r.Status == Fail })
}

// Write prints rs, one line each in the order given (the checks' fixed
// order), or as a JSON array.
func Write(w io.Writer, rs []Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rs == nil {
			rs = []Result{}
		}
		if err := enc.Encode(rs); err != nil {
			return fmt.Errorf("write doctor report: %w", err)
		}
		return nil
	}
	for _, r := range rs {
		line := fmt.Sprintf("%-4s %-18s %s", r.Status, r.Check, r.What)
		if r.Fix != "" {
			line += "  fix: " + r.Fix
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return fmt.Errorf("write doctor report: %w", err)
		}
	}
	return nil
}
