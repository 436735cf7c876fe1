package stream

import (
	"bufio"
	"bytes"
	"errors"
)

// ReadEvent appends one SSE event (up to and with its blank line) to ev;
// at the stream's end it returns what it read and the error. Blank lines
// between events are dropped; a line longer than rd's buffer is one line.
func ReadEvent(rd *bufio.Reader, ev []byte) ([]byte, error) {
	start := len(ev) // where the line being read begins in ev
	for {
		chunk, err := rd.ReadSlice('\n')
		ev = append(ev, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			// The same line goes on: a line longer than the reader is read
			// in pieces, and the '\n' that ends it is not a blank line of
			// its own (a line of exactly the buffer's size read that way
			// ended its event early, and the client joined it to the next).
			continue
		}
		if err != nil {
			return ev, err
		}
		line := ev[start:]
		start = len(ev)
		switch {
		case len(bytes.TrimSpace(line)) == 0 && len(bytes.TrimSpace(ev)) > 0:
			return ev, nil
		case len(bytes.TrimSpace(ev)) == 0:
			ev, start = ev[:0], 0 // blank lines between events
		}
	}
}

// event is what an Answer reads of one server-sent event.
type event struct {
	// data is the event's data: its data lines' values joined by '\n'
	// (a slice of the event itself when it has one); nil when none.
	data []byte
	// failed is set by an "event: error" line, or by an "error:" field,
	// which llama-server sent for in-stream errors before it sent them as
	// data: either is the head's own end of its answer.
	failed bool
}

// parseEvent reads an event's fields (SSE: "field: value" lines, ":"
// comments); joined is reused for an event of several data lines.
func parseEvent(ev []byte, joined []byte) (event, []byte) {
	var e event
	lines := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			if lines++; lines == 1 {
				e.data = value
				continue
			}
			if lines == 2 {
				joined = append(joined[:0], e.data...)
			}
			joined = append(append(joined, '\n'), value...)
			e.data = joined
		case "event":
			e.failed = e.failed || string(bytes.TrimSpace(value)) == "error"
		case "error":
			e.failed = true
		}
	}
	return e, joined
}
