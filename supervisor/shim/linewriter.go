package shim

import (
	"io"
	"sync"
)

// LineWriter is the shim's stderr: the child's stderr, the shim's log and
// the markers all pass through it, so that a marker always starts a line
// even when the child left a line unfinished. Safe for concurrent use.
type LineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	midLine bool
}

// NewLineWriter wraps w.
func NewLineWriter(w io.Writer) *LineWriter {
	return &LineWriter{w: w}
}

// Write passes p through and remembers whether it ended a line.
func (l *LineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if n > 0 {
		l.midLine = p[n-1] != '\n'
	}
	return n, err
}

// WriteLine writes s (which ends with a newline) at the start of a line,
// ending an unfinished line first, in a single write.
func (l *LineWriter) WriteLine(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.midLine {
		s = "\n" + s
	}
	_, err := io.WriteString(l.w, s)
	l.midLine = false
	return err
}
