package catalog

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parse(t *testing.T, doc string) *Models {
	t.Helper()
	m, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMerge: each model once, with its tier, its best router status across
// the heads (loaded on one replica is loaded), a minimal entry for a model
// a file lists before its head's /v1/models was read, nothing of a model no
// tier serves, and under a prefix (only) the tier's models alone.
func TestMerge(t *testing.T) {
	a := parse(t, `{"data":[{"id":"qwen-a","object":"model","status":{"value":"unloaded"}},{"id":"qwen-b","status":{"value":"failed"}},{"object":"model"}]}`)
	b := parse(t, `{"data":[{"id":"qwen-a","object":"model","status":{"value":"loaded"}}]}`)
	tierOf := func(m string) string {
		return map[string]string{"qwen-a": "fast", "qwen-b": "fast", "OR1": "reasoning"}[m]
	}
	heads := []Head{{Models: a}, {Models: b}, {Declared: []string{"OR1", "stray"}}}
	type model struct {
		ID     string `json:"id"`
		Tier   string `json:"tier"`
		Status struct {
			Value string `json:"value"`
		} `json:"status"`
	}
	for _, c := range []struct {
		name, only string
		want       []string // id/tier/status
	}{
		{"root", "", []string{"qwen-a/fast/loaded", "qwen-b/fast/failed", "OR1/reasoning/loaded"}},
		{"a prefix", "reasoning", []string{"OR1/reasoning/loaded"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var doc struct {
				Object string  `json:"object"`
				Data   []model `json:"data"`
			}
			if err := json.Unmarshal(Merge(heads, tierOf, c.only), &doc); err != nil || doc.Object != "list" {
				t.Fatalf("not a list: %v", err)
			}
			got := []string{}
			for _, m := range doc.Data {
				got = append(got, m.ID+"/"+m.Tier+"/"+m.Status.Value)
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("models (-want +got):\n%s", d)
			}
		})
	}
	if !a.Serves("qwen-b") || !a.Failed("qwen-b") || a.Failed("qwen-a") || a.Serves("") {
		t.Errorf("Serves and Failed disagree with the answer")
	}
	var none *Models
	if none.Serves("qwen-a") || none.Failed("qwen-a") {
		t.Errorf("a head not read yet serves something")
	}
}
