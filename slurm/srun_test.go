package slurm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSrunArgv(t *testing.T) {
	tests := []struct {
		name string
		step Step
		want []string
	}{
		{
			name: "worker",
			step: Step{Node: "node2", Name: StepName("big", "worker-node2"),
				Argv: []string{"ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052"}},
			want: []string{"/usr/bin/srun", "-N1", "-n1", "-w", "node2", "--overlap", "--job-name=big:worker-node2",
				"--", "ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052"},
		},
		{
			name: "extra args go before the double dash; env stays off the command line",
			step: Step{Node: "node1", Name: StepName("big", "head"), ExtraArgs: []string{"--cpus-per-task=2"},
				Env: map[string]string{"A": "x,y z"}, Argv: []string{"llama-server", "--port", "8080"}},
			want: []string{"/usr/bin/srun", "-N1", "-n1", "-w", "node1", "--overlap", "--job-name=big:head",
				"--cpus-per-task=2", "--", "llama-server", "--port", "8080"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, SrunArgv("/usr/bin/srun", tt.step)); d != "" {
				t.Errorf("SrunArgv (-want +got):\n%s", d)
			}
		})
	}
}

func TestStepEnviron(t *testing.T) {
	s := Step{Env: map[string]string{"B": "2", "A": "x,y z", "PATH": "/opt/bin"}}
	got := s.Environ([]string{"PATH=/usr/bin", "HOME=/root", "SLURM_JOB_ID=4"})
	want := []string{"HOME=/root", "SLURM_JOB_ID=4", "A=x,y z", "B=2", "PATH=/opt/bin"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Environ (-want +got):\n%s", d)
	}
}
