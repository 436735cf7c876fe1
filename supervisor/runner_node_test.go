package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/supervisor/tier"
)

// badNodeLauncher is fakeLauncher with one bad node: every start there
// ends at once with exit (Slurm refused the step, or the task failed at
// once), or, with exit nil, runs and never becomes ready.
type badNodeLauncher struct {
	*fakeLauncher
	node string
	exit *ExitResult
}

func (l badNodeLauncher) Start(p tier.Process) (Handle, error) {
	h, err := l.fakeLauncher.Start(p)
	if err != nil || p.Node != l.node {
		return h, err
	}
	fp := h.(*fakeProc)
	fp.ready = make(chan struct{}) // never ready
	if l.exit != nil {
		fp.end("exited", *l.exit)
	}
	return fp, nil
}

// gaveUp advances the rig until the runner gives up and returns Run's error.
func (g *fakeRig) gaveUp() error {
	g.t.Helper()
	g.advanceUntil("gave up", state(StateFailed), 250*time.Millisecond)
	select {
	case err := <-g.done:
		g.done <- err // for the rig's cleanup
		return err
	case <-time.After(10 * time.Second):
		g.t.Fatal("Run did not return after giving up")
		return nil
	}
}

// Regression (scripts/FACTS-cluster.md N6): a job restarted after a node
// failure got an allocation on which Slurm refused every step on the
// returned node, and the supervisor gave up like for a broken tier, so the
// job ended. When the process that made it give up could not be used on
// its node (step refused, no answer at all), the error names the node, so
// that the job can ask for a fresh allocation; a process that failed for
// itself does not.
func TestGiveUpNamesUnusableNode(t *testing.T) {
	const addr = "10.0.0.3:50052" // rpc-n2's (rigPlan), with a port
	silent := fmt.Errorf("probe %s: %w", addr, context.DeadlineExceeded)
	refused := fmt.Errorf("probe %s: %w", addr, syscall.ECONNREFUSED)
	tests := []struct {
		name  string
		exit  *ExitResult
		probe error
		// why is in the NodeError's Why; "" wants no NodeError.
		why string
	}{
		{name: "Slurm refuses the step", exit: &ExitResult{Code: 1, StepRefused: "Requested node configuration is not available"},
			why: "Slurm refused to create the step there: Requested node configuration is not available"},
		{name: "its node answers no probe", probe: silent, why: "no answer at all to the worker's startup probes"},
		{name: "the worker exits at once", exit: &ExitResult{Code: 1}},
		{name: "a step refused because the job is ending", exit: &ExitResult{Code: 1, StepRefused: "Job/step already completing or completed"}},
		{name: "its node refuses the probes: the worker does not listen", probe: refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := rigPlan(t, 2)
			plan.MinWorkers = 2
			plan.Workers[1].Port = 50052
			probe := func(context.Context, string) error { return tt.probe }
			g := newFakeRig(t, plan, func(o *Options) {
				o.Launcher = badNodeLauncher{fakeLauncher: &fakeLauncher{}, node: "n2", exit: tt.exit}
				o.Probe = probe
			})
			err := g.gaveUp()
			if !errors.Is(err, ErrGaveUp) {
				t.Fatalf("Run = %v, want ErrGaveUp", err)
			}
			var bad *NodeError
			switch {
			case tt.why == "" && errors.As(err, &bad):
				t.Errorf("Run = %v, want no NodeError: the node is not at fault", err)
			case tt.why != "" && !errors.As(err, &bad):
				t.Errorf("Run = %v, want a NodeError", err)
			case tt.why != "" && (bad.Node != "n2" || !strings.Contains(bad.Why, tt.why)):
				t.Errorf("NodeError %+v, want node n2 and %q", bad, tt.why)
			}
		})
	}
}

// The other form seen with N6: the head cannot connect to the worker on
// the returned node, again and again until the failure budget is spent.
func TestGiveUpNamesNodeUnreachableFromHead(t *testing.T) {
	plan := rigPlan(t, 2)
	plan.Restart.MaxFailures = 3
	g := newFakeRig(t, plan)
	var prev *fakeProc
	for i := 0; i < plan.Restart.MaxFailures; i++ {
		g.advanceFor("a new head", func() bool {
			h := g.l.last("head")
			return h != nil && h != prev && h.how() == ""
		}, 100*time.Millisecond)
		prev = g.l.last("head")
		prev.unreachable <- "10.0.0.3:0" // rpc-n2's address (rigPlan: no port)
	}
	err := g.gaveUp()
	var bad *NodeError
	if !errors.As(err, &bad) || bad.Node != "n2" || !strings.Contains(bad.Why, "could not connect") {
		t.Fatalf("Run = %v, want a NodeError naming n2 unreachable from the head", err)
	}
}
