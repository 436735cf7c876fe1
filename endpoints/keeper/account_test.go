package keeper

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKeeperSeesOnlyItsOwnAccountsJobs runs a pass against squeue and
// sbatch stand-ins in PATH (the keeper's default client, exec and all):
// squeue lists another user's pending job named llm-fast unless asked for
// one user's jobs with -u. With submit_as unset, the old keeper asked
// without -u, took that job for the tier's and never submitted the tier
// (issue 23, item 4); now it always asks for its own account's jobs.
func TestKeeperSeesOnlyItsOwnAccountsJobs(t *testing.T) {
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	squeue := `#!/bin/sh
echo "squeue $*" >> ` + calls + `
case " $* " in *" -u "*) exit 0 ;; esac
echo "4242 PENDING"
`
	sbatch := `#!/bin/sh
echo "sbatch $*" >> ` + calls + `
echo "77"
`
	for name, body := range map[string]string{"squeue": squeue, "sbatch": sbatch} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	cfg := testConfig(t) // submit_as unset
	k := New(cfg, Options{})
	res, err := k.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(calls)
	if res[0].Submitted != "77" {
		t.Errorf("the tier was not submitted (another user's job taken for it?): %+v\ncalls:\n%s", res[0], log)
	}
	me := strconv.Itoa(os.Getuid())
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		if strings.HasPrefix(line, "squeue") && !strings.Contains(line, " -u "+me) {
			t.Errorf("squeue asked without -u %s: %s", me, line)
		}
	}
}
