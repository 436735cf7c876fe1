package supervisor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/health"
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
					"; 1 workers would be left, min_workers is 2"},
				{Kind: stepState, To: StateFailed, Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; 1 workers would be left, min_workers is 2"}}},
		{name: "no plan without the node: give up",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartFails = 2 }),
			proc: "rpc-node2", replan: replanFails,
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepGiveUp, Proc: "rpc-node2", Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; cannot plan without it: no split fits"},
				{Kind: stepState, To: StateFailed, Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; cannot plan without it: no split fits"}}},
		{name: "no replanner: a node is never dropped",
			view: with(lifeWorld(StateRecovering, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartFails = 2 }),
			proc: "rpc-node2",
			want: []lifeStep{{Kind: stepExited, Proc: "rpc-node2", PID: 7, Result: crash, Failure: true},
				{Kind: stepStartFail, Proc: "rpc-node2"},
				{Kind: stepGiveUp, Proc: "rpc-node2", Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; 1 workers would be left, min_workers is 1"},
				{Kind: stepState, To: StateFailed, Reason: "worker rpc-node2 failed to start 3 times in a row, last " + cause +
					"; 1 workers would be left, min_workers is 1"}}},
		{name: "the failure budget is spent: give up",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady), proc: "head", giveUp: true,
			want: []lifeStep{{Kind: stepExited, Proc: "head", PID: 7, Result: crash, Failure: true},
				{Kind: stepState, To: StateRecovering, Reason: "head: " + cause},
				{Kind: stepGiveUp, Proc: "head", Reason: "5 failures in 10m"},
				{Kind: stepState, To: StateFailed, Reason: "5 failures in 10m"}},
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

func TestOnHeadReady(t *testing.T) {
	tests := []struct {
		name string
		view lifeView
		want []lifeStep
	}{
		{name: "a starting head answers /health: the tier is ready",
			view: lifeWorld(StateStarting, phaseStarting, phaseReady, phaseReady),
			want: []lifeStep{{Kind: stepHeadReady, Proc: "head", At: lifeT0}, {Kind: stepState, To: StateReady, Reason: "head answers /health"}}},
		{name: "a restarted head answers: the recovering tier is ready again",
			view: lifeWorld(StateRecovering, phaseStarting, phaseReady, phaseReady),
			want: []lifeStep{{Kind: stepHeadReady, Proc: "head", At: lifeT0}, {Kind: stepState, To: StateReady, Reason: "head answers /health"}}},
		{name: "a head already ready: nothing",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady)},
		{name: "a head being stopped: nothing",
			view: lifeWorld(StateDraining, phaseStopping, phaseReady, phaseReady)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, onHeadReady(tt.view), lifeCmp); diff != "" {
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
		{name: "a tier that saves its slots: the saves end by the wait's end plus their share",
			view: func() lifeView {
				v := lifeWorld(StateReady, phaseReady, phaseReady, phaseReady)
				v.SaveSlots, v.Split.Save = true, 3*time.Second
				return v
			}(),
			req: StopRequest{Reason: ReasonPreempted, Since: preempt},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonPreempted, Since: preempt},
				since: preempt, deadline: preempt.Add(6 * time.Second), saveBy: preempt.Add(9 * time.Second)}},
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
				{Kind: stepState, To: StateDraining, Reason: "preempted"}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "a stop that skips the drain",
			view: lifeWorld(StateReady, phaseReady, phaseReady, phaseReady),
			req:  StopRequest{Reason: ReasonShutdown, SkipDrain: true},
			want: []lifeStep{{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonShutdown, SkipDrain: true},
				since: lifeT0, deadline: lifeT0.Add(6 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "shutdown"}, {Kind: stepFinish}, {Kind: stepStopped}}},
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
				{Kind: stepStopAgain}, {Kind: stepFinish}, {Kind: stepStopped}}},
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

// checkWorld is lifeWorld with the plan's timeouts and the processes'
// clocks: every process started a minute ago, the head's last /health 200
// a second ago.
func checkWorld(state State, head, w2, w3 phase) lifeView {
	v := lifeWorld(state, head, w2, w3)
	v.Timeouts = tier.Timeouts{WorkerStart: 20 * time.Second, Load: 5 * time.Minute, UnhealthyAfter: 10 * time.Second, Stall: 2 * time.Minute}
	v.Head.StartedAt, v.Head.LastOK = lifeT0.Add(-time.Minute), lifeT0.Add(-time.Second)
	for i := range v.Workers {
		v.Workers[i].StartedAt = lifeT0.Add(-time.Minute)
		v.Workers[i].Addr = fmt.Sprintf("10.0.0.%d:50052", i+2)
	}
	return v
}

// The conditions the poll, the health check, the silent-link check and the
// drain once decided in the runner's acting methods (issue 30: its state
// changed in three files), as rows: a view and an event in, the steps out.
func TestOnChecks(t *testing.T) {
	with := func(v lifeView, f func(*lifeView)) lifeView { f(&v); return v }
	restarted := func(name, cause string) []lifeStep {
		return []lifeStep{{Kind: stepState, To: StateRecovering, Reason: name + ": " + cause},
			{Kind: stepRecheck, Proc: name}, {Kind: stepRestartAt, Proc: name, Delay: 2 * time.Second}, {Kind: stepReconcile}}
	}
	hung := "hung: requests in flight and no progress for 2m0s (a worker's link silent?)"
	busy := func(work float64) loadMsg {
		return loadMsg{metrics: health.Metrics{InFlight: 2, HasWork: true, Work: work}}
	}
	idle := loadMsg{metrics: health.Metrics{HasWork: true, Work: 7}}
	draining := func(f func(*drainState)) lifeView {
		v := checkWorld(StateDraining, phaseReady, phaseReady, phaseReady)
		v.Drain = drainState{deadline: lifeT0.Add(time.Second)}
		if f != nil {
			f(&v.Drain)
		}
		return v
	}
	saving := func(under bool) lifeView {
		v := draining(func(d *drainState) { d.saveBy, d.saving = lifeT0.Add(2*time.Second), under })
		v.SaveSlots = true
		return v
	}
	tests := []struct {
		name  string
		rule  func(lifeView, lifeDeps) []lifeStep
		view  lifeView
		want  []lifeStep
		asked []Failure
	}{
		{name: "a worker starting for worker_start: stopped, a failed start",
			view: checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onWorkerDeadline(v, "rpc-node2", d) },
			want: append([]lifeStep{{Kind: stepStop, Proc: "rpc-node2", Reason: "not ready in time"}, {Kind: stepStartFail, Proc: "rpc-node2"}},
				restarted("rpc-node2", "failed to start: not ready after 20s")...),
			asked: []Failure{{Process: "rpc-node2", Cause: "failed to start: not ready after 20s"}}},
		{name: "one whose probes got no answer at all: its node is at fault",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].SilentSince = lifeT0.Add(-25 * time.Second) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onWorkerDeadline(v, "rpc-node2", d) },
			want: append([]lifeStep{{Kind: stepStop, Proc: "rpc-node2", Reason: "not ready in time"},
				{Kind: stepNodeFault, Proc: "rpc-node2", Reason: "no answer at all to the worker's startup probes for 25s"},
				{Kind: stepStartFail, Proc: "rpc-node2"}}, restarted("rpc-node2", "failed to start: not ready after 20s")...),
			asked: []Failure{{Process: "rpc-node2", Cause: "failed to start: not ready after 20s"}}},
		{name: "a worker starting within worker_start: nothing",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].StartedAt = lifeT0.Add(-20 * time.Second) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onWorkerDeadline(v, "rpc-node2", d) }},
		{name: "a head loading for longer than load: stopped, a failure",
			view:  with(checkWorld(StateStarting, phaseStarting, phaseReady, phaseReady), func(v *lifeView) { v.Head.StartedAt = lifeT0.Add(-6 * time.Minute) }),
			rule:  onHeadDeadline,
			want:  append([]lifeStep{{Kind: stepStop, Proc: "head", Reason: "not ready in time"}}, restarted("head", "not ready after 5m0s")...),
			asked: []Failure{{Process: "head", Cause: "not ready after 5m0s"}}},
		{name: "a serving head with no /health 200 for unhealthy_after: stopped, a failure",
			view:  with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.Head.LastOK = lifeT0.Add(-11 * time.Second) }),
			rule:  onHeadDeadline,
			want:  append([]lifeStep{{Kind: stepStop, Proc: "head", Reason: "unhealthy"}}, restarted("head", "/health failing for more than 10s")...),
			asked: []Failure{{Process: "head", Cause: "/health failing for more than 10s"}}},
		{name: "a healthy head: nothing", view: checkWorld(StateReady, phaseReady, phaseReady, phaseReady), rule: onHeadDeadline},
		{name: "no /health 200 for exactly unhealthy_after: not yet",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.Head.LastOK = lifeT0.Add(-10 * time.Second) }),
			rule: onHeadDeadline},
		{name: "busy and progressing: the progress is kept",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.Head.BusySince, v.Head.Work = lifeT0.Add(-time.Hour), 3 }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, busy(4), d) },
			want: []lifeStep{{Kind: stepProgress, Work: 4, At: lifeT0}}},
		{name: "idle: never stalled",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.Head.BusySince = lifeT0.Add(-time.Hour) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, idle, d) },
			want: []lifeStep{{Kind: stepProgress, Work: 7}}},
		{name: "busy with no progress for stall: hung, killed with its workers restarted",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.Head.BusySince, v.Head.Work = lifeT0.Add(-2*time.Minute), 4 }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, busy(4), d) },
			want: append([]lifeStep{{Kind: stepHung, Reason: hung, N: 2, Delay: 2 * time.Minute},
				{Kind: stepKill, Proc: "head", Reason: hung},
				{Kind: stepStop, Proc: "rpc-node2", Reason: "restarted after a hung head: a worker cut off from it holds its dead connection"},
				{Kind: stepStop, Proc: "rpc-node3", Reason: "restarted after a hung head: a worker cut off from it holds its dead connection"}},
				restarted("head", hung)...),
			asked: []Failure{{Process: "head", Cause: hung}}},
		{name: "a reading that fails before the head was seen busy: nothing",
			view: checkWorld(StateReady, phaseReady, phaseReady, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, loadMsg{err: errors.New("timeout")}, d) }},
		{name: "an extra replica idle for idle_exit: an ordered stop",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) {
				v.IdleExit, v.IdleSince = 10*time.Minute, lifeT0.Add(-10*time.Minute)
			}),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, idle, d) },
			want: []lifeStep{{Kind: stepProgress, Work: 7}, {Kind: stepIdleExit, Delay: 10 * time.Minute},
				{Kind: stepDrain, Drain: drainState{req: StopRequest{Reason: ReasonIdle, Since: lifeT0}, since: lifeT0,
					deadline: lifeT0.Add(9 * time.Second), notBefore: lifeT0.Add(3 * time.Second)}},
				{Kind: stepState, To: StateDraining, Reason: "idle"}, {Kind: stepWaitDrain}}},
		{name: "an extra replica counted busy: its idle count starts again",
			view: with(checkWorld(StateReady, phaseReady, phaseReady, phaseReady), func(v *lifeView) { v.IdleExit, v.IdleSince = time.Minute, lifeT0.Add(-time.Second) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onLoad(v, busy(1), d) },
			want: []lifeStep{{Kind: stepProgress, Work: 1, At: lifeT0}, {Kind: stepIdleSince}}},
		{name: "a silent link: the head and its workers restarted",
			view: checkWorld(StateReady, phaseReady, phaseReady, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onSilentLink(v, []string{"10.0.0.3:50052"}, d) },
			want: append([]lifeStep{{Kind: stepLinkSilent, Nodes: []string{"10.0.0.3:50052"}},
				{Kind: stepKill, Proc: "head", Reason: "the link to worker 10.0.0.3:50052 is silent (sent data retransmitted, nothing acknowledged)"},
				{Kind: stepStop, Proc: "rpc-node2", Reason: "restarted after a hung head: a worker cut off from it holds its dead connection"},
				{Kind: stepStop, Proc: "rpc-node3", Reason: "restarted after a hung head: a worker cut off from it holds its dead connection"}},
				restarted("head", "the link to worker 10.0.0.3:50052 is silent (sent data retransmitted, nothing acknowledged)")...),
			asked: []Failure{{Process: "head", Cause: "the link to worker 10.0.0.3:50052 is silent (sent data retransmitted, nothing acknowledged)"}}},
		{name: "a silent link while draining: nothing",
			view: checkWorld(StateDraining, phaseReady, phaseReady, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onSilentLink(v, []string{"10.0.0.3:50052"}, d) }},
		{name: "the drain's budget spent: stop with requests in flight",
			view: with(draining(nil), func(v *lifeView) { v.Now = lifeT0.Add(time.Second) }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) },
			want: []lifeStep{{Kind: stepSpent}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "draining: the head is asked what it has in flight",
			view: draining(nil), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) },
			want: []lifeStep{{Kind: stepCount}}},
		{name: "draining, a count under way: nothing",
			view: draining(func(d *drainState) { d.checking = true }), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) }},
		{name: "nothing in flight: the drain's wait ends",
			view: draining(nil), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) },
			want: []lifeStep{{Kind: stepCounted}, {Kind: stepIdle}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "nothing in flight, but the controller may still route here: wait",
			view: draining(func(d *drainState) { d.notBefore = lifeT0.Add(time.Second) }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) },
			want: []lifeStep{{Kind: stepCounted}}},
		{name: "a count that fails: waits as if busy, said once",
			view: draining(nil), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, errors.New("503")) },
			want: []lifeStep{{Kind: stepCounted, Err: errors.New("503")}, {Kind: stepUnsure, Err: errors.New("503")}}},
		{name: "a count that fails again: nothing more said",
			view: draining(func(d *drainState) { d.unsure = true }), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, errors.New("503")) },
			want: []lifeStep{{Kind: stepCounted, Err: errors.New("503")}}},
		{name: "counted again after failures",
			view: draining(func(d *drainState) { d.unsure = true }), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 3, nil) },
			want: []lifeStep{{Kind: stepCounted, N: 3}, {Kind: stepSure, N: 3}}},
		{name: "saving slots: nothing in flight, the slots are saved before the stop",
			view: saving(false), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) },
			want: []lifeStep{{Kind: stepCounted}, {Kind: stepIdle}, {Kind: stepSave, At: lifeT0.Add(2 * time.Second)}}},
		{name: "saving slots: the wait's budget spent, the idle slots are saved before the stop",
			view: with(saving(false), func(v *lifeView) { v.Now = lifeT0.Add(time.Second) }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) },
			want: []lifeStep{{Kind: stepSpent}, {Kind: stepSave, At: lifeT0.Add(2 * time.Second)}}},
		{name: "saving slots, the head not ready: nothing to save, stop",
			view: with(saving(false), func(v *lifeView) { v.Head.Phase = phaseStarting }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) },
			want: []lifeStep{{Kind: stepCounted}, {Kind: stepIdle}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "saves under way: the poll neither counts nor stops",
			view: with(saving(true), func(v *lifeView) { v.Now = lifeT0.Add(time.Second) }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) }},
		{name: "saves past their deadline: the stop goes on (the requeue is never later)",
			view: with(saving(true), func(v *lifeView) { v.Now = lifeT0.Add(2 * time.Second) }),
			rule: func(v lifeView, _ lifeDeps) []lifeStep { return onDrainPoll(v) },
			want: []lifeStep{{Kind: stepSaveLate}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "a count that comes back while saving: only counted",
			view: saving(true), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) },
			want: []lifeStep{{Kind: stepCounted}}},
		{name: "the saves ended: stop",
			view: saving(true), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onSaved(v, 2, nil) },
			want: []lifeStep{{Kind: stepSaved, N: 2}, {Kind: stepFinish}, {Kind: stepStopped}}},
		{name: "saves that end after the stop: nothing",
			view: saving(false), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onSaved(v, 2, nil) }},
		{name: "a count while serving: nothing (it is only published)",
			view: checkWorld(StateReady, phaseReady, phaseReady, phaseReady), rule: func(v lifeView, _ lifeDeps) []lifeStep { return onInFlight(v, 0, nil) }},
		{name: "a probe answered: the worker is ready",
			view: checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onProbe(v, "rpc-node2", probeAnswered, nil, d) },
			want: []lifeStep{{Kind: stepReady, Proc: "rpc-node2", Reason: "port accepts connections"}, {Kind: stepReconcile}}},
		{name: "a probe refused: its node answers",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].SilentSince = lifeT0.Add(-time.Second) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onProbe(v, "rpc-node2", probeRefused, nil, d) },
			want: []lifeStep{{Kind: stepSilentAt, Proc: "rpc-node2"}}},
		{name: "the first probe with no answer at all",
			view: checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onProbe(v, "rpc-node2", probeSilent, nil, d) },
			want: []lifeStep{{Kind: stepSilentAt, Proc: "rpc-node2", At: lifeT0}}},
		{name: "no answer for 3 s, room to drop it: dropped at once",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) { v.Workers[0].SilentSince = lifeT0.Add(-3 * time.Second) }),
			rule: func(v lifeView, d lifeDeps) []lifeStep {
				d.Replan = replanOK
				return onProbe(v, "rpc-node2", probeSilent, nil, d)
			},
			want: []lifeStep{
				{Kind: stepState, To: StateRecovering, Reason: "worker rpc-node2 dropped: unreachable from the batch node for 3s (no answer at all: its link or node is down, a restart cannot help)"},
				{Kind: stepDropped, Proc: "rpc-node2", Reason: "unreachable from the batch node for 3s (no answer at all: its link or node is down, a restart cannot help)", Nodes: []string{"node3"}},
				{Kind: stepStop, Proc: "rpc-node2", Reason: "dropped"}, {Kind: stepStop, Proc: "head", Reason: "worker set changed"},
				{Kind: stepApplyPlan, Plan: smallerPlan}, {Kind: stepReconcile}}},
		{name: "no answer for 3 s, no room: said once",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) {
				v.Workers[0].SilentSince, v.MinWorkers = lifeT0.Add(-3*time.Second), 2
			}),
			rule: func(v lifeView, d lifeDeps) []lifeStep {
				d.Replan = replanOK
				return onProbe(v, "rpc-node2", probeSilent, nil, d)
			},
			want: []lifeStep{{Kind: stepNoRoom, Proc: "rpc-node2"}}},
		{name: "no answer, no room, already said: nothing",
			view: with(checkWorld(StateStarting, phaseDown, phaseStarting, phaseReady), func(v *lifeView) {
				v.Workers[0].SilentSince, v.Workers[0].SilentLogged, v.MinWorkers = lifeT0.Add(-time.Minute), true, 2
			}),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onProbe(v, "rpc-node2", probeSilent, nil, d) }},
		{name: "the head cannot connect to a worker: killed, the worker's start failed on its node",
			view: checkWorld(StateStarting, phaseStarting, phaseReady, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onUnreachable(v, "10.0.0.3:50052", d) },
			want: append([]lifeStep{{Kind: stepUnreached, Proc: "rpc-node3", Reason: "10.0.0.3:50052"},
				{Kind: stepKill, Proc: "head", Reason: "could not connect to worker rpc-node3"},
				{Kind: stepStop, Proc: "rpc-node3", Reason: "unreachable from the head"},
				{Kind: stepNodeFault, Proc: "rpc-node3", Reason: "the head could not connect to its worker at 10.0.0.3:50052"},
				{Kind: stepStartFail, Proc: "rpc-node3"},
				{Kind: stepState, To: StateRecovering, Reason: "rpc-node3: failed to start: unreachable from the head (10.0.0.3:50052)"},
				{Kind: stepRecheck, Proc: "rpc-node3"},
				{Kind: stepKill, Proc: "head", Reason: "worker rpc-node3 failed: the head cannot serve without it"}},
				lifeStep{Kind: stepRestartAt, Proc: "rpc-node3", Delay: 2 * time.Second}, lifeStep{Kind: stepReconcile}),
			asked: []Failure{{Process: "rpc-node3", Cause: "failed to start: unreachable from the head (10.0.0.3:50052)"}}},
		{name: "an address that is no worker's: said",
			view: checkWorld(StateStarting, phaseStarting, phaseReady, phaseReady),
			rule: func(v lifeView, d lifeDeps) []lifeStep { return onUnreachable(v, "10.9.9.9:1", d) },
			want: []lifeStep{{Kind: stepUnreached, Reason: "10.9.9.9:1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []Failure
			got := tt.rule(tt.view, lifeDeps{Policy: restartIn(2*time.Second, &asked)})
			if diff := cmp.Diff(tt.want, got, lifeCmp, cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error()) })); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.asked, asked); diff != "" {
				t.Errorf("failures the policy was asked about (-want +got):\n%s", diff)
			}
		})
	}
}
