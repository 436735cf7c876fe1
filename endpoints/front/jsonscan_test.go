package front

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzReadKeys: the top-level walk reads the same "model" and "stream" as
// encoding/json from any valid object, never panics on anything else, and
// the model it splices in reads back.
func FuzzReadKeys(f *testing.F) {
	for _, s := range []string{`{"model":"a","stream":true}`, `{"messages":[{"content":"\"}{"}],"model":"x\u00e9"}`,
		`{"mod\u0065l":"b"}`, ` { } `, `null`, `{"a":[1,{"b":"]"}],"model":null}`, `{"model":"a","MODEL":"b"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		k, err := readKeys(body)
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil || obj == nil {
			return // not an object: readKeys may refuse it or leave it to the head
		}
		if err != nil {
			if err.Error() == `the body names "model" twice` || err.Error() == `the body names "stream" twice` {
				return
			}
			t.Fatalf("readKeys(%q): %v, but encoding/json reads it", body, err)
		}
		if got, want := compact(k.model), compact(obj["model"]); got != want {
			t.Fatalf("readKeys(%q) model %s, encoding/json %s", body, got, want)
		}
		if want := compact(obj["stream"]) == "true"; k.stream != want {
			t.Fatalf("readKeys(%q) stream %v, want %v", body, k.stream, want)
		}
		out := apply(body, setModel(body, k, "m-é"))
		var back map[string]json.RawMessage
		if err := json.Unmarshal(out, &back); err != nil || compact(back["model"]) != `"m-é"` {
			t.Fatalf("setModel(%q) = %q (%v)", body, out, err)
		}
	})
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
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
		appendText(&got, ci.content)
		if string(got) != *want && bytes.Equal(bytes.ToValidUTF8(got, []byte("\uFFFD")), got) {
			t.Fatalf("scanChat(%q) content %q, encoding/json %q", data, got, *want)
		}
	})
}
