// Package elastic is the membership of an elastic tier: a distributed tier
// whose nodes are separate one-node Slurm jobs (members), so that science
// taking one node takes one member, not the tier. Members find each other
// through files in the shared endpoint directory (never through a service
// that must be up), one of them leads (it runs the head llama-server with
// --rpc to the others, which run rpc-server), and a new leader is chosen
// when it goes.
//
// Leadership is by term: a member leads term N once it has created the
// file term-N exclusively (O_EXCL, atomic on local file systems and NFS;
// N is one more than the highest number any term file has), and only
// while its lease holds. Its lead ends at one absolute time, on its own
// node's clock (Timing.LeadEnd: the lease's end less the skew and a
// margin), when its head's shim kills the head whatever the leader does; a
// member takes the next term only after the old leader's lease has ended
// plus the skew; and every worker restarts its rpc-server for a new term,
// so no head of an older term can hold a worker. Together: at most one
// head at a time.
//
// The package decides (Decide, pure) and keeps the files (Store); starting
// and stopping processes is the member runner's (runner.go).
package elastic

import "slurm-llm/endpoints/members"

// The member and term files are endpoints/members' (the contract the
// controller reads too); these names let the leadership rule and the
// member runner read as they did when the files lived here.
type (
	Member   = members.Member
	Term     = members.Term
	State    = members.State
	Store    = members.Store
	Contents = members.Contents
	Ignored  = members.Ignored
)

// The states of a member (members.State).
const (
	StateJoining = members.StateJoining
	StateReady   = members.StateReady
	StateLeaving = members.StateLeaving
)

// SchemaVersion is the member and term files' version.
const SchemaVersion = members.SchemaVersion

// ErrTermTaken means another member created the term file first.
var ErrTermTaken = members.ErrTermTaken

// NewStore returns the store of tier under endpointDir.
func NewStore(endpointDir, tier string, allowedUIDs []uint32) *Store {
	return members.NewStore(endpointDir, tier, allowedUIDs)
}

// Younger reports whether job a was submitted after job b (members.Younger).
func Younger(a, b string) bool { return members.Younger(a, b) }
