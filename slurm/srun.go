package slurm

import (
	"sort"
	"strings"
)

// Step is one process the supervisor starts as its own job step on one node.
type Step struct {
	// Node is the node the step runs on (srun -w).
	Node string
	// Name is the step name shown by `squeue -s`; build it with StepName.
	Name string
	// ExtraArgs are more srun options, placed before the "--" that ends them.
	ExtraArgs []string
	// Env is added to the srun client's environment by Environ. srun passes
	// its whole environment to the task (its default --export=ALL), so
	// nothing of Env goes on the command line and values need no quoting.
	Env map[string]string
	// Argv is the program and its arguments, run on Node.
	Argv []string
}

// StepName names a step after its tier and role ("llama70b:head",
// "llama70b:worker-node2"), so `squeue -s` says what each step is.
func StepName(tier, role string) string {
	return tier + ":" + role
}

// SrunArgv returns the command line that runs s as a step inside the current
// job: `srun -N1 -n1 -w NODE --overlap --job-name=NAME [extra...] -- argv...`.
// srun is the srun binary (a path or "srun").
//
//   - --overlap lets the step share the node with the other steps (fact 8).
//   - No --kill-on-bad-exit: with one task it changes nothing, and the
//     supervisor, not Slurm, decides what a step's exit means.
//   - No --unbuffered: -u runs the task on a pseudo-terminal (measured: its
//     stdout is a tty), which changes how programs log. Without it srun
//     forwards each complete line at once (measured: 30 ms); only a partial
//     line waits for its newline.
//   - No --input: srun forwards its own stdin to the task by default, which a
//     caller may use to talk to the step.
//
// Run it with cmd.Env = s.Environ(os.Environ()) to give the step s.Env.
func SrunArgv(srun string, s Step) []string {
	argv := []string{srun, "-N1", "-n1", "-w", s.Node, "--overlap", "--job-name=" + s.Name}
	argv = append(argv, s.ExtraArgs...)
	argv = append(argv, "--")
	return append(argv, s.Argv...)
}

// Environ returns base (as os.Environ gives it) with s.Env set on top, sorted
// by key for the added variables; a key in both takes s.Env's value.
func (s Step) Environ(base []string) []string {
	out := make([]string, 0, len(base)+len(s.Env))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, override := s.Env[k]; !override {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+s.Env[k])
	}
	return out
}
