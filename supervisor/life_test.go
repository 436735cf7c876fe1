package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/supervisor/tier"
)

// Every transition of the tier's life is a row here: a view, an event, the
// steps (life.go). No process runs; the clock is the view's, the restart
// policy and the replanner are stand-ins.

var lifeT0 = time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)

// lifeWorld is a split tier (head, rpc-node2, rpc-node3) in state, with
// the head and the workers in the phases given.
func lifeWorld(state State, head, w2, w3 phase) lifeView {
	return lifeView{
		Now: lifeT0, State: state,
		Head: procView{Name: "head", Node: "node1", Phase: head},
		Workers: []procView{{Name: "rpc-node2", Node: "node2", Phase: w2},
			{Name: "rpc-node3", Node: "node3", Phase: w3}},
		MinWorkers: 1, StartFailLimit: 3,
		Split:       tier.DrainSplit{Budget: 9 * time.Second, InFlight: 6 * time.Second},
		IdleUnroute: 3 * time.Second,
	}
}

// restartIn is a restart policy that always restarts after d, and one that
// gives up; each records the failures it was asked about.
func restartIn(d time.Duration, asked *[]Failure) func(Failure, time.Time) (Decision, time.Duration) {
	return func(f Failure, _ time.Time) (Decision, time.Duration) {
		*asked = append(*asked, f)
		return Decision{Action: ActionRestart}, d
	}
}

func giveUpWith(reason string, asked *[]Failure) func(Failure, time.Time) (Decision, time.Duration) {
	return func(f Failure, _ time.Time) (Decision, time.Duration) {
		*asked = append(*asked, f)
		return Decision{Action: ActionGiveUp, Reason: reason}, 0
	}
}

var smallerPlan = &tier.Plan{Tier: "smaller"}

func replanOK(nodes []string) (*tier.Plan, error) { return smallerPlan, nil }

func replanFails(nodes []string) (*tier.Plan, error) { return nil, errors.New("no split fits") }

func TestOnExit(t *testing.T) {
	crash := ExitResult{Code: 134}
	cause := "exited: " + crash.String()
	with := func(v lifeView, f func(*lifeView)) lifeView { f(&v); return v }
	tests := []struct {
		name      string
		view      lifeView
		proc      string
		giveUp    bool
		replan    func([]string) (*tier.Plan, error)
		want      []lifeStep
		wantAsked []Failure
	}{
		{name: "a process the runner stopped: expected, nothing fails",
			view: lifeWorld(StateRecovering, phaseDown, phaseStopping, phaseReady), proc: "rpc-node2",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash}, {Kind: stepReconcile}}},
		{name: "any exit while draining is expected",
			view: lifeWorld(StateDraining, phaseReady, phaseReady, phaseReady), proc: "head",
			want: []lifeStep{{Kind: stepExited, Proc: "head", PID: 7, Result: crash}, {Kind: stepReconcile}}},
		{name: "the head crashes: restarted alone, the workers keep running",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "head",
			want: []lifeStep{{Kind: stepExited, Proc: "head", PID: 7, Result: crash, Failure: true},
				{Kind: stepState, To: StateRecovering, Reason: "head: " + cause},
				{Kind: stepRecheck, Proc: "head"},
				{Kind: stepRestartAt, Proc: "head", Delay: 2 * time.Second}, {Kind: stepReconcile}},
			wantAsked: []Failure{{Process: "head", Cause: cause}}},
		{name: "a running worker crashes: the head is killed at once (facts 13)",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "rpc-node3",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node3", PID: 7, Result: crash, Failure: true},
				{Kind: stepState, To: StateRecovering, Reason: "rpc-node3: " + cause},
				{Kind: stepRecheck, Proc: "rpc-node3"},
				{Kind: stepKill, Proc: "head", Reason: "worker rpc-node3 failed: the head cannot serve without it"},
				{Kind: stepRestartAt, Proc: "rpc-node3", Delay: 2 * time.Second}, {Kind: stepReconcile}},
			wantAsked: []Failure{{Process: "rpc-node3", Cause: cause}}},
		{name: "a running worker crashes while the head is down: nothing to kill",
			view: lifeWorld(StateRecovering, phaseDown, phaseReady, phaseReady), proc: "rpc-node3",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node3", PID: 7, Result: crash, Failure: true},
				{Kind: stepState, To: StateRecovering, Reason: "rpc-node3: " + cause},
				{Kind: stepRecheck, Proc: "rpc-node3"},
				{Kind: stepRestartAt, Proc: "rpc-node3", Delay: 2 * time.Second}, {Kind: stepReconcile}},
			wantAsked: []Failure{{Process: "rpc-node3", Cause: cause}}},
		{name: "a starting worker exits: a failed start, restarted",
			view: lifeWorld(StateStarting, phaseDown, phaseStarting, phaseReady), proc: "rpc-node2",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepState, To: StateRecovering, Reason: "rpc-node2: failed to start: " + cause},
				{Kind: stepRecheck, Proc: "rpc-node2"},
				{Kind: stepRestartAt, Proc: "rpc-node2", Delay: 2 * time.Second}, {Kind: stepReconcile}},
			wantAsked: []Failure{{Process: "rpc-node2", Cause: "failed to start: " + cause}}},
		{name: "the third failed start in a row drops the node and replans",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartFails = 2 }),
			proc: "rpc-node2", replan: replanOK,
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepState, To: StateRecovering, Reason: "worker rpc-node2 dropped: failed to start 3 times in a row, last " + cause},
				{Kind: stepDropped, Proc: "rpc-node2", Reason: "failed to start 3 times in a row, last " + cause, Nodes: []string{"node3"}},
				{Kind: stepStop, Proc: "rpc-node2", Reason: "dropped"},
				{Kind: stepStop, Proc: "head", Reason: "worker set changed"},
				{Kind: stepApplyPlan, Plan: smallerPlan}, {Kind: stepReconcile}}},
		{name: "a node that cannot be dropped below min_workers: give up",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) {
				v.Workers[0].StartFails, v.MinWorkers = 2, 2
			}),
			proc: "rpc-node2", replan: replanOK,
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepGiveUp, Proc: "rpc-node2", Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; 1 workers would be left, min_workers is 2"}}},
		{name: "no plan without the node: give up",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartFails = 2 }),
			proc: "rpc-node2", replan: replanFails,
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepGiveUp, Proc: "rpc-node2", Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; cannot plan without it: no split fits"}}},
		{name: "no replanner: a node is never dropped",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartFails = 2 }),
			proc: "rpc-node2",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepGiveUp, Proc: "rpc-node2", Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; 1 workers would be left, min_workers is 1"}}},
		{name: "the failure budget is spent: give up",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "head", giveUp: true,
			want: []lifeStep{{Kind: stepExited, Proc: "head", PID: 7, Result: crash, Failure: true},
				{Kind: stepState, To: StateRecovering, Reason: "head: " + cause},
				{Kind: stepGiveUp, Proc: "head", Reason: "5 failures in 10m"}},
			wantAsked: []Failure{{Process: "head", Cause: cause}}},
		{name: "a process of no plan: nothing",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "rpc-node9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []Failure
			d := lifeDeps{Policy: restartIn(2*time.Second, &asked), Replan: tt.replan}
			if tt.giveUp {
				d.Policy = giveUpWith("5 failures in 10m", &asked)
			}
			got := onExit(tt.view, tt.proc, 7, crash, d)
			if diff := cmp.Diff(tt.want, got, lifeCmp); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAsked, asked); diff != "" {
				t.Errorf("failures the policy was asked about (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnReady(t *testing.T) {
	tests := []struct {
		name string
		view lifeView
		proc string
		want []lifeStep
	}{
		{name: "a starting worker is ready: the head may start",
			view: lifeWorld(StateStarting, phaseDown, phaseStarting, phaseReady), proc: "rpc-node2",
			want: []lifeStep{{Kind: stepReady, Proc: "rpc-node2", Reason: "ready pattern seen"}, {Kind: stepReconcile}}},
		{name: "a worker already ready: nothing",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "rpc-node2"},
		{name: "a worker being stopped: nothing",
			view: lifeWorld(StateRecovering, phaseDown, phaseStopping, phaseReady), proc: "rpc-node2"},
		{name: "the head: its readiness is its /health",
			view: lifeWorld(StateStarting, phaseStarting, phaseReady, phaseReady), proc: "head"},
		{name: "a process of no plan: nothing",
			view: lifeWorld(StateStarting, phaseDown, phaseStarting, phaseReady), proc: "rpc-node9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := onReady(tt.view, tt.proc, "ready pattern seen")
			if diff := cmp.Diff(tt.want, got, lifeCmp); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOnStop(t *testing.T) {
	preempt := lifeT0.Add(-2 * time.Second) // Slurm's PreemptTime, before the notice reached us
	tests := []struct {
		name string
		view lifeView
		req  StopRequest
		want []lifeStep
	}{
		{name: "a preemption notice: draining, the budget counts from PreemptTime",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonPreempted, Since: preempt},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonPreempted, Since: preempt},
				since: preempt, deadline: preempt.Add(6 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "preempted"}, {Kind: stepWaitDrain}}},
		{name: "a signal with no time: the budget counts from now",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonCancelled},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonCancelled},
				since: lifeT0, deadline: lifeT0.Add(6 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "cancelled"}, {Kind: stepWaitDrain}}},
		{name: "no ready head: nothing to wait for, stop at once",
			view: lifeWorld(StateRecovering, phaseStarting, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonPreempted, Since: preempt},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonPreempted, Since: preempt},
				since: preempt, deadline: preempt.Add(6 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "preempted"}, {Kind: stepFinish}}},
		{name: "a stop that skips the drain",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonShutdown, SkipDrain: true},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonShutdown, SkipDrain: true},
				since: lifeT0, deadline: lifeT0.Add(6 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "shutdown"}, {Kind: stepFinish}}},
		{name: "an idle extra waits to be unrouted first",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonIdle, Since: lifeT0},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonIdle, Since: lifeT0},
				since: lifeT0, deadline: lifeT0.Add(9 * time.Second), notBefore: lifeT0.Add(3 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "idle"}, {Kind: stepWaitDrain}}},
		{name: "while draining: Slurm's reason arrives",
			view: lifeWorld(StateDraining, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonPreempted, Since: preempt},
			want: []lifeStep{{Kind: stepUpdateStop, Req: StopRequest{Reason: ReasonPreempted, Since: preempt}}}},
		{name: "while draining: a second signal cuts the wait",
			view: lifeWorld(StateDraining, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonShutdown, SkipDrain: true},
			want: []lifeStep{{Kind: stepUpdateStop, Req: StopRequest{Reason: ReasonShutdown, SkipDrain: true}},
				{Kind: stepStopAgain}, {Kind: stepFinish}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := onStop(tt.view, tt.req)
			if diff := cmp.Diff(tt.want, got, lifeCmp); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

// lifeCmp compares steps: a drain's fields, and plans by identity.
var lifeCmp = cmp.Options{cmp.AllowUnexported(drainState{}),
	cmp.Comparer(func(a, b *tier.Plan) bool { return a == b })}
