package supervisor

import (
	"testing"

	"slurm-llm/endpoints"
)

func TestCanTransition(t *testing.T) {
	all := []State{StateStarting, StateReady, StateRecovering, StateDraining, StateStopped, StateFailed}
	allowed := map[[2]State]bool{
		{StateStarting, StateReady}:        true,
		{StateStarting, StateRecovering}:   true,
		{StateStarting, StateDraining}:     true,
		{StateStarting, StateFailed}:       true,
		{StateReady, StateRecovering}:      true,
		{StateReady, StateDraining}:        true,
		{StateReady, StateFailed}:          true,
		{StateRecovering, StateReady}:      true,
		{StateRecovering, StateRecovering}: true,
		{StateRecovering, StateDraining}:   true,
		{StateRecovering, StateFailed}:     true,
		{StateDraining, StateStopped}:      true,
		{StateDraining, StateFailed}:       true,
	}
	for _, from := range all {
		for _, to := range all {
			name := string(from) + "->" + string(to)
			t.Run(name, func(t *testing.T) {
				if got, want := CanTransition(from, to), allowed[[2]State{from, to}]; got != want {
					t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
				}
			})
		}
	}
	if CanTransition("", StateReady) || CanTransition(StateReady, "") {
		t.Error("the zero state takes part in a transition")
	}
}

func TestStateEndpoint(t *testing.T) {
	tests := []struct {
		name   string
		state  State
		want   endpoints.State
		wantOK bool
	}{
		{name: "starting", state: StateStarting, want: endpoints.StateStarting, wantOK: true},
		{name: "recovering is starting", state: StateRecovering, want: endpoints.StateStarting, wantOK: true},
		{name: "ready", state: StateReady, want: endpoints.StateReady, wantOK: true},
		{name: "draining", state: StateDraining, want: endpoints.StateDraining, wantOK: true},
		{name: "stopped removes", state: StateStopped},
		{name: "failed removes", state: StateFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.state.Endpoint()
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Endpoint() = %q, %v; want %q, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
