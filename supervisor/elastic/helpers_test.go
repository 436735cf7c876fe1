package elastic

import "time"

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// member is a valid member file for job, at t0.
func member(job string) Member {
	return Member{Schema: SchemaVersion, Tier: "reasoning", JobID: job, RunID: "00000000000000" + job[len(job)-2:],
		Node: "node" + job[len(job)-1:], Addr: "10.78.0." + job[len(job)-1:], RPCPort: 50052, State: StateReady,
		Heartbeat: t0, LeaseExpires: t0.Add(10 * time.Second)}
}
