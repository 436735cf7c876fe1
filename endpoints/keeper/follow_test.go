package keeper

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
)

// TestFollower follows keeper.toml through the life a long-running watcher
// sees (issue 27): not there yet, written, a tier added (a new file renamed
// over it), broken (the last good one kept), written in place, removed, and
// read again whatever its stamp after Reset (SIGHUP).
func TestFollower(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keeper.toml")
	head := fmt.Sprintf("state_dir = %q\n", filepath.Join(dir, "state"))
	tier := func(name string) string {
		return fmt.Sprintf("[tiers.%s]\nscript = \"/usr/local/bin/%s.sbatch\"\n", name, name)
	}
	n := 0
	replace := func(body string) { // as an editor does: a new file renamed over the old
		n++
		tmp := filepath.Join(dir, fmt.Sprintf(".keeper-%d", n))
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	var logs strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &logs})
	var f Follower
	tiers := func() string {
		kc := f.Refresh(path, log)
		if kc == nil {
			return "none"
		}
		return strings.Join(kc.TierNames(), ",")
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{name: "no file yet", do: func() {}, want: "none"},
		{name: "written", do: func() { replace(head + tier("reasoning")) }, want: "reasoning"},
		{name: "unchanged", do: func() {}, want: "reasoning"},
		{name: "a tier added", do: func() { replace(head + tier("reasoning") + tier("fast")) }, want: "fast,reasoning"},
		{name: "broken: the last good one kept", do: func() { replace(head + "this is not toml\n") }, want: "fast,reasoning"},
		{name: "removed", do: func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, want: "none"},
		{name: "back", do: func() { replace(head + tier("fast")) }, want: "fast"},
		{name: "read again after Reset", do: func() { f.Reset() }, want: "fast"},
	}
	var want, got []string
	for _, s := range steps {
		s.do()
		want, got = append(want, s.name+": "+s.want), append(got, s.name+": "+tiers())
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tiers, step by step (-want +got):\n%s\nlog:\n%s", d, logs.String())
	}
	if f.Refresh("", log) != nil {
		t.Error(`Refresh("") gave a config, want none`)
	}
	for _, line := range []string{"keeper config read again", "keeper config not read; views keep the last one read", "keeper config gone"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs.String())
		}
	}
}
