// Package journal gives the programs' log lines the syslog priority that
// systemd's journal reads at the start of each line on a service's
// standard error ("<3>" error … "<7>" debug; SyslogLevelPrefix= is on by
// default), so that `journalctl -p warning` shows warnings and errors
// only. Nothing changes when standard error is not the journal's stream:
// a terminal, a file, a Slurm job's output.
package journal

import (
	"bytes"
	"io"
	"os"
	"sync"

	sdjournal "github.com/coreos/go-systemd/v22/journal"
	"github.com/hashicorp/go-hclog"
)

// Syslog priorities (RFC 5424) of the levels the programs log at.
const (
	PriorityError = 3
	PriorityWarn  = 4
	PriorityInfo  = 6
	PriorityDebug = 7
)

// Priority is the syslog priority of an hclog level: trace and debug are
// debug, info is info, warn is warning, error is error.
func Priority(l hclog.Level) int {
	switch {
	case l >= hclog.Error:
		return PriorityError
	case l == hclog.Warn:
		return PriorityWarn
	case l == hclog.Info, l == hclog.NoLevel, l == hclog.DefaultLevel:
		return PriorityInfo
	default: // trace, debug
		return PriorityDebug
	}
}

// IsStream reports whether w is this process's standard error and that
// is the journal's stream: JOURNAL_STREAM, which systemd sets, names its
// device and inode. The variable alone is not enough: it is inherited,
// e.g. by a job the keeper's service submits with sbatch (whose default
// --export=ALL passes it on), whose standard error is a file.
func IsStream(w io.Writer) bool {
	if f, ok := w.(*os.File); !ok || f != os.Stderr {
		return false
	}
	ok, err := sdjournal.StderrIsJournalStream()
	return ok && err == nil
}

// Wrap is w for a logger's Output or the access log: when w is the
// journal's stream, a Writer onto it (an hclog entry's lines begin with
// its level's priority, other lines with info's); otherwise w itself.
func Wrap(w io.Writer) io.Writer {
	if !IsStream(w) {
		return w
	}
	return NewWriter(w, PriorityInfo)
}

// Writer begins each line written to it with a syslog priority prefix:
// LevelWrite (hclog calls it with each entry's level) with the level's,
// Write with the default. It is safe for concurrent use; a line written
// in several calls gets one prefix.
type Writer struct {
	w   io.Writer
	def int
	mu  sync.Mutex
	mid bool // the last write ended inside a line
	buf []byte
}

// NewWriter returns a Writer onto w whose Write uses priority def.
func NewWriter(w io.Writer, def int) *Writer { return &Writer{w: w, def: def} }

// Write writes p with the default priority at each line's start.
func (jw *Writer) Write(p []byte) (int, error) { return jw.write(jw.def, p) }

// LevelWrite writes p with level's priority at each line's start
// (hclog.LevelWriter).
func (jw *Writer) LevelWrite(level hclog.Level, p []byte) (int, error) {
	return jw.write(Priority(level), p)
}

// write prefixes each line of p that starts in it and writes the whole
// in one call to w (the journal reads a stream: one call per entry keeps
// an entry's lines together).
func (jw *Writer) write(prio int, p []byte) (int, error) {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	prefix := [3]byte{'<', byte('0' + prio), '>'}
	b := jw.buf[:0]
	for rest := p; len(rest) > 0; {
		if !jw.mid {
			b = append(b, prefix[:]...)
		}
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b = append(b, rest...)
			jw.mid = true
			break
		}
		b = append(b, rest[:i+1]...)
		rest = rest[i+1:]
		jw.mid = false
	}
	jw.buf = b
	if _, err := jw.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}
