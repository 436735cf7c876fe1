// Package members owns an elastic tier's member and term files, the second
// contract between the job side and the controller (beside the endpoint
// file): <endpoint_dir>/members/<tier>/member-<job>.json, which every
// member rewrites at each heartbeat, and term-<n>.json, created once by the
// member that leads term N. It holds their format, strict reading (the
// files are untrusted input: any job writes the directory) and atomic
// writing. The leadership rule that reads them is the job side's
// (supervisor/elastic); the keeper reads them to count live members. It
// imports neither side.
package members

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"time"

	"slurm-llm/endpoints"
)

// SchemaVersion is the version of the member and term files.
const SchemaVersion = 1

// State is where a member is in its life. The zero value is invalid.
type State string

// The states of a member.
const (
	// StateJoining: started, its rpc-server not yet listening.
	StateJoining State = "joining"
	// StateReady: its rpc-server listens (worker), or it leads.
	StateReady State = "ready"
	// StateLeaving: its job is ending (preempted, cancelled, time limit):
	// the leader must stop using it by LeaveBy.
	StateLeaving State = "leaving"
)

// Member is one member's file, members/<tier>/member-<job>.json. Every
// member rewrites its own at each heartbeat; all read all.
type Member struct {
	Schema int    `json:"schema"`
	Tier   string `json:"tier"`
	// JobID and RestartCount name the member's job and run; RunID its
	// supervisor's run (a requeued job is a new member).
	JobID        string `json:"job_id"`
	RestartCount int    `json:"restart_count"`
	RunID        string `json:"run_id"`
	// Node runs the member; Addr is its cluster-network address (IPoIB),
	// where its rpc-server listens on RPCPort.
	Node    string `json:"node"`
	Addr    string `json:"addr"`
	RPCPort int    `json:"rpc_port"`
	State   State  `json:"state"`
	// Term is the highest term the member has seen. A worker's rpc-server
	// was (re)started for this term: no head of an older term holds it.
	Term int `json:"term"`
	// Leads is set on the leader of Term.
	Leads bool `json:"leads,omitempty"`
	// CannotLead is set on a member that must not lead: the model is not
	// readable on its node (any member may lead, so every node needs it).
	CannotLead bool `json:"cannot_lead,omitempty"`
	// Using lists, on the leader, the job ids of the workers its head runs
	// with; a leaving worker is free once it is not listed.
	Using []string `json:"using,omitempty"`
	// LeaveBy is, on a leaving member, when it must be gone.
	LeaveBy time.Time `json:"leave_by"`
	// Joined is when this run of the member first wrote its file.
	Joined time.Time `json:"joined"`
	// Reason says why the member is in its state, for people.
	Reason       string    `json:"reason,omitempty"`
	Heartbeat    time.Time `json:"heartbeat"`
	LeaseExpires time.Time `json:"lease_expires"`
}

// Term is a term file, members/<tier>/term-<n>.json: created once, by the
// member that leads term N, and never changed.
type Term struct {
	Schema  int       `json:"schema"`
	N       int       `json:"term"`
	JobID   string    `json:"job_id"`
	RunID   string    `json:"run_id"`
	Node    string    `json:"node"`
	Created time.Time `json:"created"`
}

var runIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Validate checks a member read from a file (untrusted: any job writes the
// directory).
func (m Member) Validate() error {
	var errs []error
	if m.Schema != SchemaVersion {
		errs = append(errs, fmt.Errorf("schema %d (want %d)", m.Schema, SchemaVersion))
	}
	if err := endpoints.CheckTier(m.Tier); err != nil {
		errs = append(errs, err)
	}
	if err := endpoints.CheckJobID(m.JobID); err != nil {
		errs = append(errs, err)
	}
	if !runIDRE.MatchString(m.RunID) {
		errs = append(errs, errors.New("run_id: want 16 hex digits"))
	}
	if err := endpoints.CheckHost(m.Node); err != nil {
		errs = append(errs, fmt.Errorf("node: %w", err))
	}
	if _, err := netip.ParseAddr(m.Addr); err != nil {
		errs = append(errs, fmt.Errorf("addr: want an IP address: %w", err))
	}
	if m.RPCPort < 1 || m.RPCPort > 65535 {
		errs = append(errs, fmt.Errorf("rpc_port %d out of range", m.RPCPort))
	}
	switch m.State {
	case StateJoining, StateReady, StateLeaving:
	default:
		errs = append(errs, fmt.Errorf("state %q unknown", m.State))
	}
	if m.Term < 0 || m.RestartCount < 0 {
		errs = append(errs, errors.New("negative term or restart count"))
	}
	if m.LeaseExpires.Before(m.Heartbeat) || m.LeaseExpires.Sub(m.Heartbeat) > time.Hour {
		errs = append(errs, errors.New("lease_expires: before heartbeat or more than an hour after it"))
	}
	for _, j := range m.Using {
		if endpoints.CheckJobID(j) != nil {
			errs = append(errs, fmt.Errorf("using: %q is not a job id", j))
			break
		}
	}
	return errors.Join(errs...)
}

// Validate checks a term read from a file.
func (t Term) Validate() error {
	switch {
	case t.Schema != SchemaVersion:
		return fmt.Errorf("schema %d (want %d)", t.Schema, SchemaVersion)
	case t.N < 1 || t.N > MaxTerm:
		return fmt.Errorf("term %d: want 1 to %d", t.N, MaxTerm)
	case endpoints.CheckJobID(t.JobID) != nil:
		return fmt.Errorf("job_id %q: not a job id", t.JobID)
	case !runIDRE.MatchString(t.RunID):
		return errors.New("run_id: want 16 hex digits")
	case t.Node != "" && endpoints.CheckHost(t.Node) != nil:
		return fmt.Errorf("node: %w", endpoints.CheckHost(t.Node))
	}
	return nil
}

// Live reports whether m's lease holds at now.
func (m Member) Live(now time.Time) bool { return !now.After(m.LeaseExpires) }

// Usable reports whether m can serve the tier at now: live and not leaving.
func (m Member) Usable(now time.Time) bool { return m.Live(now) && m.State != StateLeaving }

// Younger reports whether job a was submitted after job b: its id is the
// larger number. Slurm (preempt/partition_prio) preempts the
// earliest-submitted of equal-sized jobs first (measured, slurm/FACTS.md),
// so the youngest member is the one Slurm takes last: it should lead.
func Younger(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// Request is an operator's request to an elastic tier's leader,
// members/<tier>/request.json, written by `llm-upstreams tier grow|handover`
// (as the tier account): do now, draining first, what the leader otherwise
// does only once its head has been idle for grow_after. The leader acts on
// a request made after it began leading, once.
type Request struct {
	Schema int `json:"schema"`
	// Action is RequestGrow or RequestHandover.
	Action string `json:"action"`
	// At is when it was asked; the leader takes each At once.
	At time.Time `json:"at"`
}

// The actions of a Request.
const (
	// RequestGrow: re-plan onto every member up now, if that is more nodes.
	RequestGrow = "grow"
	// RequestHandover: hand the lead to the younger member now, if one is up.
	RequestHandover = "handover"
)

// Validate checks a request read from a file.
func (r Request) Validate() error {
	switch {
	case r.Schema != SchemaVersion:
		return fmt.Errorf("schema %d (want %d)", r.Schema, SchemaVersion)
	case r.Action != RequestGrow && r.Action != RequestHandover:
		return fmt.Errorf("action %q: want %q or %q", r.Action, RequestGrow, RequestHandover)
	case r.At.IsZero():
		return errors.New("at: missing")
	}
	return nil
}
