package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/tiers"
)

// The front door's start says when its settings cannot continue a stream
// cut by a drain (issue 27): here the keeper does not release the fast
// tier's requeued job (Slurm's 121 s hold, beyond the 30 s hold) and
// hold_unknown is 0; the reasoning tier, released, with a 2 m hold, is
// fine.
func TestFrontWarnsWhenADrainedStreamCannotBeContinued(t *testing.T) {
	dir := t.TempDir()
	keeperConf := filepath.Join(dir, "keeper.toml")
	keeperText := "state_dir = \"" + filepath.Join(dir, "keeper") + "\"\n" +
		"[tiers.fast]\nscript = \"/bin/true\"\nrelease = false\n[tiers.reasoning]\nscript = \"/bin/true\"\n"
	if err := os.WriteFile(keeperConf, []byte(keeperText), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := "endpoint_dir = \"" + dir + "/endpoints\"\noutput_dir = \"" + dir + "/out\"\nlock_file = \"" + dir + "/lock\"\n" +
		anyOwnerAnyNetwork + "keeper_config = \"" + keeperConf + "\"\n[tiers.fast]\n[tiers.reasoning]\n" +
		"[front]\nlisten = \"127.0.0.1:1\"\nhold_unknown = \"0s\"\n[front.tiers.reasoning]\nhold = \"2m\"\n"
	cfg, err := config.Parse("upstreams.toml", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &out})
	warnContinuation(tiers.New(cfg.Watcher, tiers.Options{Log: log}).ContinueFacts(cfg.Front.Hold, cfg.Front.HoldUnknown), log)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`tier=fast why="[front] hold_unknown = 0s`,
		`tier=fast why="[front.tiers.fast] hold = 30s: after the cut the tier is back at the earliest 2m1s later (Slurm's requeue hold 2m1s: release = false for tier fast in ` + keeperConf,
		`tier=reasoning why="[front] hold_unknown = 0s`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "a stream cut by a drain would not be continued") || !strings.Contains(lines[i], w) {
			t.Errorf("warning %d:\n%s\nwant one saying %s", i, lines[i], w)
		}
	}
}
