package front

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"slurm-llm/endpoints/front/wire"
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
				ev, err := readEvent(rd, nil)
				if err != nil {
					t.Fatal(err)
				}
				if string(ev) != first {
					t.Fatalf("first event: %d bytes ending %q, want %d bytes ending %q", len(ev), tail(ev), len(first), tail([]byte(first)))
				}
				ev, err = readEvent(rd, ev[:0])
				if err != nil || string(ev) != second {
					t.Fatalf("second event: %q, %v; want %q", ev, err, second)
				}
				if _, err := readEvent(rd, ev[:0]); err != io.EOF {
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

// FuzzScanChat: a head's event, whatever it holds, never panics the scan,
// and a chunk's content decodes as encoding/json decodes it.
func FuzzScanChat(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"a\nb\u00e9\ud83d\ude00"},"finish_reason":null}],"id":"x"}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":3}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ci, ok := scanChat(data)
		// encoding/json's reading with exact keys (as the client's SDK
		// reads them: JSON keys are case-sensitive).
		var top map[string]json.RawMessage
		var choices []map[string]json.RawMessage
		var delta map[string]json.RawMessage
		var want *string
		if !ok || json.Unmarshal(data, &top) != nil || json.Unmarshal(top["choices"], &choices) != nil || len(choices) == 0 ||
			json.Unmarshal(choices[0]["delta"], &delta) != nil || json.Unmarshal(delta["content"], &want) != nil || want == nil {
			return
		}
		var got []byte
		wire.AppendText(&got, ci.content)
		if string(got) != *want && bytes.Equal(bytes.ToValidUTF8(got, []byte("\uFFFD")), got) {
			t.Fatalf("scanChat(%q) content %q, encoding/json %q", data, got, *want)
		}
	})
}
