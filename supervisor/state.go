package supervisor

import "slurm-llm/endpoints"

// State is where a tier is in its life, as the runner sees it. The zero
// value is invalid; a runner begins in StateStarting.
type State string

// The states of a tier. Transitions are allowed by CanTransition only.
const (
	// StateStarting: the first start of the tier's processes.
	StateStarting State = "starting"
	// StateReady: every process runs and the head answers /health with 200.
	StateReady State = "ready"
	// StateRecovering: a process died or failed its checks; it is being restarted.
	StateRecovering State = "recovering"
	// StateDraining: an ordered stop is under way.
	StateDraining State = "draining"
	// StateStopped: the ordered stop ended; every process is gone (terminal).
	StateStopped State = "stopped"
	// StateFailed: the supervisor gave up; every process is gone (terminal).
	StateFailed State = "failed"
)

// CanTransition reports whether a tier may go from one state to another.
// It is the one place that says which transitions exist.
func CanTransition(from, to State) bool {
	switch from {
	case StateStarting, StateRecovering:
		return to == StateReady || to == StateRecovering || to == StateDraining || to == StateFailed
	case StateReady:
		return to == StateRecovering || to == StateDraining || to == StateFailed
	case StateDraining:
		return to == StateStopped || to == StateFailed
	default:
		return false
	}
}

// Terminal reports whether s ends the runner.
func (s State) Terminal() bool { return s == StateStopped || s == StateFailed }

// Endpoint maps a tier state to the state its endpoint file publishes; ok is
// false for the terminal states, whose endpoint file is removed.
func (s State) Endpoint() (st endpoints.State, ok bool) {
	switch s {
	case StateStarting, StateRecovering:
		return endpoints.StateStarting, true
	case StateReady:
		return endpoints.StateReady, true
	case StateDraining:
		return endpoints.StateDraining, true
	default:
		return "", false
	}
}
