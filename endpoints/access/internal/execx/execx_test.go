package execx

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// printEnv prints the variables a Slurm command's output depends on.
var printEnv = []string{"/bin/sh", "-c", `printf '%s|%s|%s' "${SLURM_TIME_FORMAT-unset}" "${SQUEUE_SORT-unset}" "${SLURM_CONF-unset}"`}

// TestSlurmEnvironment pins that a front door started with
// SLURM_TIME_FORMAT or SQUEUE_* set does not pass them to sacctmgr and
// sshare, while Exec (munge, unmunge) keeps the environment as it is.
func TestSlurmEnvironment(t *testing.T) {
	t.Setenv("SLURM_TIME_FORMAT", "relative")
	t.Setenv("SQUEUE_SORT", "-i")
	t.Setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
	tests := []struct {
		name string
		run  Runner
		want string
	}{
		{name: "Slurm", run: Slurm, want: "standard|unset|/etc/slurm/slurm.conf"},
		{name: "Exec", run: Exec, want: "relative|-i|/etc/slurm/slurm.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := tt.run(context.Background(), printEnv, nil)
			if err != nil {
				t.Fatalf("%v: %s", err, errOut)
			}
			if d := cmp.Diff(tt.want, string(out)); d != "" {
				t.Errorf("environment seen (-want +got):\n%s", d)
			}
		})
	}
}
