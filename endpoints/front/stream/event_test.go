package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestReadEventLongLines: an SSE line of exactly the reader's size (16 KiB)
// or a multiple is one line, and the '\n' after it ends that line, not the
// event (issue 37: the event lost its end and the client joined it to the
// next, broken JSON or a last chunk that swallowed [DONE]).
func TestReadEventLongLines(t *testing.T) {
	const size = 16 << 10
	for _, n := range []int{size - 1, size, size + 1, 2 * size, 3*size - 1, 3 * size} {
		for _, crlf := range []bool{false, true} {
			t.Run(fmt.Sprintf("line of %d bytes, crlf %v", n, crlf), func(t *testing.T) {
				nl := "\n"
				if crlf {
					nl = "\r\n"
				}
				// The line is n bytes before its end of line.
				first := "data: " + strings.Repeat("x", n-len("data: ")) + nl + nl
				second := "data: [DONE]" + nl + nl
				rd := bufio.NewReaderSize(strings.NewReader(first+second), size)
				ev, err := ReadEvent(rd, nil)
				if err != nil {
					t.Fatal(err)
				}
				if string(ev) != first {
					t.Fatalf("first event: %d bytes ending %q, want %d bytes ending %q", len(ev), tail(ev), len(first), tail([]byte(first)))
				}
				ev, err = ReadEvent(rd, ev[:0])
				if err != nil || string(ev) != second {
					t.Fatalf("second event: %q, %v; want %q", ev, err, second)
				}
				if _, err := ReadEvent(rd, ev[:0]); err != io.EOF {
					t.Errorf("after the last event: %v, want EOF", err)
				}
			})
		}
	}
}

func tail(b []byte) []byte {
	if len(b) > 12 {
		return b[len(b)-12:]
	}
	return bytes.Clone(b)
}
