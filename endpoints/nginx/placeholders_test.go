package nginx

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPlaceholdersWriteOnlyMissingFiles: a fresh install gets every tier's
// upstream file with nothing live, and a file a watcher already wrote
// (live servers) is kept byte for byte.
func TestPlaceholdersWriteOnlyMissingFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nginx", "slurm-llm")
	cfg := Config{OutputDir: dir}
	tiers := []TierSpec{{Name: "fast"}, {Name: "reasoning", Backup: "fast"}}
	wrote, err := WritePlaceholders(cfg, tiers, "/ep", "llm-upstreams test")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "upstream-fast.conf"), filepath.Join(dir, "upstream-reasoning.conf")}
	if d := cmp.Diff(want, wrote); d != "" {
		t.Fatalf("first run wrote (-want +got):\n%s", d)
	}
	b, err := os.ReadFile(want[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "upstream slurm_llm_fast") || !strings.Contains(string(b), "127.0.0.1:9 down") {
		t.Errorf("placeholder is not the no-live rendering:\n%s", b)
	}
	live := []byte("# written by the watcher\n")
	if err := os.WriteFile(want[1], live, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(want[0]); err != nil {
		t.Fatal(err)
	}
	wrote, err = WritePlaceholders(cfg, tiers, "/ep", "llm-upstreams test")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want[:1], wrote); d != "" {
		t.Errorf("second run wrote (-want +got):\n%s", d)
	}
	if got, _ := os.ReadFile(want[1]); string(got) != string(live) {
		t.Errorf("an existing upstream file was replaced: %q", got)
	}
}
