package share

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWeightsRunSshareInSlurmEnvironment pins that NewWeights without a
// runner runs sshare as every parsed Slurm command runs
// (slurm.CommandEnv): before, it inherited the front door's
// SLURM_TIME_FORMAT as it was. The fake answers only in the forced
// environment.
func TestWeightsRunSshareInSlurmEnvironment(t *testing.T) {
	sshare := filepath.Join(t.TempDir(), "sshare")
	script := "#!/bin/sh\n" +
		`[ "$SLURM_TIME_FORMAT" = standard ] || { echo "SLURM_TIME_FORMAT=$SLURM_TIME_FORMAT" >&2; exit 1; }` + "\n" +
		"echo 'root||'; echo ' chem||'; echo '  chem|alice|0.750000'\n"
	if err := os.WriteFile(sshare, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLURM_TIME_FORMAT", "%d/%m %H:%M")
	w := NewWeights(WeightsOptions{Sshare: sshare})
	if err := w.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[Assoc]float64{{"chem", "alice"}: 0.75}, w.factors); d != "" {
		t.Errorf("factors (-want +got):\n%s", d)
	}
}
