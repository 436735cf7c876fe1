package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"slurm-llm/supervisor/tier"
)

// TestUnsafeSharedDirsStopTheStart: the tier does not start on an endpoint
// directory others can write, nor on an elastic tier's members directory
// another user made first (issue 23); the error says how to fix it. A safe
// directory passes, and the members directories are made safe when missing.
func TestUnsafeSharedDirsStopTheStart(t *testing.T) {
	open := filepath.Join(t.TempDir(), "endpoints")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o1777)
	err := checkSharedDirs(&tier.Config{Tier: "fast", EndpointDir: open})
	if err == nil || !strings.Contains(err.Error(), "writable by others") || !strings.Contains(err.Error(), "chmod o-w") {
		t.Errorf("a world-writable endpoint dir: %v", err)
	}

	safe := t.TempDir()
	cfg := &tier.Config{Tier: "reasoning", EndpointDir: safe, Elastic: &tier.Elastic{}}
	if err := checkSharedDirs(cfg); err != nil {
		t.Fatalf("a safe endpoint dir: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(safe, "members", "reasoning")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("members/reasoning not made safe: %v %v", fi, err)
	}
	if os.Getuid() == 0 {
		squat := t.TempDir()
		os.Mkdir(filepath.Join(squat, "members"), 0o755)
		os.Chown(filepath.Join(squat, "members"), 4242, 4242)
		err := checkSharedDirs(&tier.Config{Tier: "reasoning", EndpointDir: squat, Elastic: &tier.Elastic{}})
		if err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
			t.Errorf("a members dir made by another user: %v", err)
		}
	}
}
