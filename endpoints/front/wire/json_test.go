package wire

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
		k, err := ReadKeys(body)
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil || obj == nil {
			return // not an object: ReadKeys may refuse it or leave it to the head
		}
		if err != nil {
			if err.Error() == `the body names "model" twice` || err.Error() == `the body names "stream" twice` {
				return
			}
			t.Fatalf("ReadKeys(%q): %v, but encoding/json reads it", body, err)
		}
		if got, want := compact(k.Model), compact(obj["model"]); got != want {
			t.Fatalf("ReadKeys(%q) model %s, encoding/json %s", body, got, want)
		}
		if want := compact(obj["stream"]) == "true"; k.Stream != want {
			t.Fatalf("ReadKeys(%q) stream %v, want %v", body, k.Stream, want)
		}
		out := Apply(body, SetModel(body, k, "m-é"))
		var back map[string]json.RawMessage
		if err := json.Unmarshal(out, &back); err != nil || compact(back["model"]) != `"m-é"` {
			t.Fatalf("SetModel(%q) = %q (%v)", body, out, err)
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
