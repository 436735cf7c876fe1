package doctor

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// fakeHost answers commands from a table keyed by the command line
// (Cmd.String()); a command not in it is missing. Files and entries
// likewise. It records each command's stdin.
type fakeHost struct {
	cmds    map[string]Output
	files   map[string]string
	entries map[string]Entry
	stdin   map[string]string
}

func (f *fakeHost) host() Host {
	return Host{
		Run: func(_ context.Context, c Cmd) Output {
			if f.stdin == nil {
				f.stdin = map[string]string{}
			}
			f.stdin[c.String()] = c.Stdin
			out, found := f.cmds[c.String()]
			if !found {
				return Output{Missing: true, Err: errors.New("not found")}
			}
			return out
		},
		ReadFile: func(p string) ([]byte, error) {
			if s, found := f.files[p]; found {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		Stat: func(p string) Entry {
			if e, found := f.entries[p]; found {
				e.Path = p
				return e
			}
			return Entry{Path: p, Err: fs.ErrNotExist, NotExist: true}
		},
	}
}

// exit1 is a command that failed with this output on stderr.
func exit1(stderr string) Output {
	return Output{Stderr: stderr, Err: errors.New("exit status 1")}
}

var errExit252 = errors.New("exit status 252")

func stdout(s string) Output { return Output{Stdout: s} }

// hasFix fails t unless r has status want and its fix names each of
// fixes.
func hasFix(t *testing.T, r Result, want Status, fixes ...string) {
	t.Helper()
	if r.Status != want {
		t.Errorf("status = %v, want %v: %+v", r.Status, want, r)
	}
	for _, f := range fixes {
		if !strings.Contains(r.Fix, f) {
			t.Errorf("fix %q does not name %q (what: %s)", r.Fix, f, r.What)
		}
	}
	if want == OK && r.Fix != "" {
		t.Errorf("an ok result has a fix: %+v", r)
	}
}
