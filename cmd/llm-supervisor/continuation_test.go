package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped defaults against each other (issue 27): for each shipped
// tier config, its drain (etc/*.toml), the front door's holds
// (etc/upstreams.toml) and the keeper's release (etc/keeper.toml) let the
// front door continue a stream the drain cuts: check-config reads all
// three and warns of nothing.
func TestShippedDefaultsContinueADrainedStream(t *testing.T) {
	for _, f := range []string{"fast.toml", "reasoning.toml", "reasoning-elastic.toml"} {
		t.Run(f, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runCheckConfig([]string{filepath.Join("..", "..", "etc", f), "--nodelist", "node[1-3]"}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d:\n%s", code, stderr.String())
			}
			out := stdout.String()
			if !strings.Contains(out, "the front door (../../etc/upstreams.toml) holds it") ||
				!strings.Contains(out, "the keeper's release (2s, ../../etc/keeper.toml)") || strings.Contains(out, "warning:") {
				t.Errorf("want the drain checked against the shipped upstreams.toml and keeper.toml, no warning:\n%s", out)
			}
		})
	}
}

// check-config warns when the front door beside the tier config could not
// continue a stream its drain cuts: no estimate is ever held
// (hold_unknown 0) and the keeper does not release the tier, so Slurm's
// 121 s requeue hold outlasts the 30 s hold.
func TestCheckConfigWarnsWhenADrainedStreamCannotBeContinued(t *testing.T) {
	dir := t.TempDir()
	tierPath := writeFile(t, dir, "fast.toml", `tier = "fast"
kind = "single"
endpoint_dir = "/e"
log_dir = "/l"
[head]
command = ["llama-server", "--port", "{port}"]
port = 8080
`)
	writeFile(t, dir, "keeper.toml", "state_dir = \"/k\"\n[tiers.fast]\nscript = \"/s.sbatch\"\nrelease = false\n")
	writeFile(t, dir, "upstreams.toml", `endpoint_dir = "/e"
allow_any_owner = true
allow_any_network = true
keeper_config = "/nonexistent/keeper.toml"
[tiers.fast]
[front]
hold_unknown = "0s"
`)
	var stdout, stderr bytes.Buffer
	if code := runCheckConfig([]string{tierPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	var warnings []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		if w, ok := strings.CutPrefix(line, "warning: "); ok {
			warnings = append(warnings, w)
		}
	}
	want := []string{"hold_unknown = 0s", "hold = 30s: after the cut the tier is back at the earliest 2m10s later (the drain's ordered stop 9s, Slurm's requeue hold 2m1s: release = false for tier fast in " + dir + "/keeper.toml"}
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want %d:\n%s", warnings, len(want), stdout.String())
	}
	for i, w := range want {
		if !strings.Contains(warnings[i], w) {
			t.Errorf("warning %q does not say %q", warnings[i], w)
		}
	}
}
