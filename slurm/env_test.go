package slurm

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestAllocationFromEnv(t *testing.T) {
	full := map[string]string{
		"SLURM_JOB_ID":        "42",
		"SLURM_JOB_NAME":      "llm-big",
		"SLURM_JOB_PARTITION": "gpu_ai",
		"SLURM_JOB_NODELIST":  "node[1-3]",
		"SLURMD_NODENAME":     "node2",
		"SLURM_RESTART_COUNT": "3",
		"SLURM_SUBMIT_DIR":    "/home/u",
	}
	tests := []struct {
		name string
		env  map[string]string
		want Allocation
	}{
		{
			name: "all set",
			env:  full,
			want: Allocation{JobID: "42", JobName: "llm-big", Partition: "gpu_ai",
				Nodes: []string{"node1", "node2", "node3"}, BatchNode: "node2", RestartCount: 3, SubmitDir: "/home/u"},
		},
		{
			name: "first run: no restart count, no node name",
			env:  map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "vasp-[01-02]"},
			want: Allocation{JobID: "7", Nodes: []string{"vasp-01", "vasp-02"}, BatchNode: "vasp-01"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AllocationFromEnv(mapEnv(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("AllocationFromEnv (-want +got):\n%s", d)
			}
		})
	}
}

func TestAllocationFromEnvErrors(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		notInJob bool
		mention  string
	}{
		{name: "outside a job", env: map[string]string{"SLURM_JOB_NODELIST": "node1"}, notInJob: true, mention: "SLURM_JOB_ID is not set"},
		{name: "no node list", env: map[string]string{"SLURM_JOB_ID": "1"}, mention: "SLURM_JOB_NODELIST"},
		{name: "bad node list", env: map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[3-1]"}, mention: "SLURM_JOB_NODELIST"},
		{name: "empty node list", env: map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": ","}, mention: "SLURM_JOB_NODELIST"},
		{name: "bad restart count", env: map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_RESTART_COUNT": "x"}, mention: "SLURM_RESTART_COUNT"},
		{name: "negative restart count", env: map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_RESTART_COUNT": "-1"}, mention: "SLURM_RESTART_COUNT"},
		{name: "batch node outside the list", env: map[string]string{"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1", "SLURMD_NODENAME": "n9"}, mention: "SLURMD_NODENAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AllocationFromEnv(mapEnv(tt.env))
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, ErrNotInJob); got != tt.notInJob {
				t.Errorf("errors.Is(%v, ErrNotInJob) = %v, want %v", err, got, tt.notInJob)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}
