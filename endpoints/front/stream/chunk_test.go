package stream

import (
	"bytes"
	"encoding/json"
	"testing"

	"slurm-llm/endpoints/front/wire"
)

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
