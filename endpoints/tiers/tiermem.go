package tiers

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/slurm"
)

// tierMem is what the controller remembers about a tier between passes and
// across restarts (<state_dir>/tiers.json): its measured start-to-routed
// times, where its job last ran (to find the job that preempted it), that
// it was preempted, and its last recorded availability state. Watch keeps
// it; sync and status read it.
type tierMem struct {
	// Ready are the last start-to-routed times in seconds, oldest first:
	// from a run's started_at (its supervisor's start, a fraction of a
	// second after the job's) to the first pass that routed it.
	Ready []float64 `json:"ready_seconds,omitempty"`
	// LastRun names the run last routed ("file restart run_id"): each run
	// gives one sample, at its first routing.
	LastRun string `json:"last_run,omitempty"`
	// Nodes, NodesJob and Partition are the hostlist, job and partition of
	// the tier's job when last seen running.
	Nodes     string `json:"nodes,omitempty"`
	NodesJob  string `json:"nodes_job,omitempty"`
	Partition string `json:"partition,omitempty"`
	// Preempted is set from the moment the tier's job is seen preempted
	// (PreemptTime, or a draining file saying so) until it is routed again.
	Preempted *preemptMark `json:"preempted,omitempty"`
	// State and Reason are the last recorded availability (record.go),
	// since Since; OutageStart and OutageCause describe the outage under
	// way, if State is not routed.
	State       string    `json:"state,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	Since       time.Time `json:"since"`
	OutageStart time.Time `json:"outage_start"`
	OutageCause string    `json:"outage_cause,omitempty"`
}

// preemptMark says which job was preempted, and when it was first seen
// so; Restarts is the restart count of the run that was preempted, so that
// a listing from before its requeue (that run still RUNNING) is not taken
// for the next run starting.
type preemptMark struct {
	Job      string    `json:"job"`
	At       time.Time `json:"at"`
	Restarts int       `json:"restarts"`
}

// PreemptedAt is when the tier was preempted; zero when it was not.
func (m tierMem) PreemptedAt() time.Time {
	if m.Preempted == nil {
		return time.Time{}
	}
	return m.Preempted.At
}

// medianReady is the median of the start-to-routed samples; 0 without any.
func (m tierMem) medianReady() time.Duration {
	if len(m.Ready) == 0 {
		return 0
	}
	s := slices.Clone(m.Ready)
	slices.Sort(s)
	mid := s[len(s)/2]
	if len(s)%2 == 0 {
		mid = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return time.Duration(mid * float64(time.Second)).Round(time.Millisecond)
}

// maxReadySample bounds a start-to-routed sample: longer means the run was
// routed, lost, and routed again, not a start.
const maxReadySample = 2 * time.Hour

// observeInput is what one pass saw of a tier, for observeTier.
type observeInput struct {
	// Own: routed to its own endpoints; Live are those entries.
	Own  bool
	Live []endpoints.Decision
	// Decisions are all the tier's entries.
	Decisions []endpoints.Decision
	// Jobs are the tier's jobs as the queue listed them; nil when not asked
	// or not answered.
	Jobs []slurm.QueuedJob
	// WatchStart is when this process started: a run that started before
	// it gives no sample (its start was not seen).
	WatchStart time.Time
	Now        time.Time
	// Samples is how many samples to keep.
	Samples int
}

// observeTier folds one pass into the tier's memory. It is pure.
func observeTier(m tierMem, in observeInput) tierMem {
	m.Ready = slices.Clone(m.Ready)
	for _, j := range in.Jobs {
		if j.State == slurm.JobRunning && j.NodeList != "" {
			m.Nodes, m.NodesJob, m.Partition = j.NodeList, j.ID, j.Partition
		}
		if !j.Preempt.IsZero() && (m.Preempted == nil || m.Preempted.Job != j.ID) {
			m.Preempted = &preemptMark{Job: j.ID, At: j.Preempt, Restarts: j.Restarts}
		}
	}
	for _, d := range in.Decisions {
		e := d.Endpoint
		if e.State == endpoints.StateDraining && e.Reason == "preempted" && !in.Now.After(e.LeaseExpires) &&
			(m.Preempted == nil || m.Preempted.Job != e.JobID) {
			m.Preempted = &preemptMark{Job: e.JobID, At: in.Now, Restarts: e.RestartCount}
		}
	}
	if !in.Own {
		return m
	}
	m.Preempted = nil
	run := firstRun(in.Live)
	if run == nil {
		return m
	}
	key := runKey(*run)
	if key == m.LastRun {
		return m
	}
	m.LastRun = key
	started := run.Endpoint.StartedAt
	took := in.Now.Sub(started)
	if started.After(in.WatchStart) && took > 0 && took < maxReadySample {
		m.Ready = append(m.Ready, took.Seconds())
		if n := max(in.Samples, 1); len(m.Ready) > n {
			m.Ready = m.Ready[len(m.Ready)-n:]
		}
	}
	return m
}

// firstRun is the live entry that started first (the tier's head; several
// only for a tier with replicas), or nil.
func firstRun(live []endpoints.Decision) *endpoints.Decision {
	var first *endpoints.Decision
	for i := range live {
		if first == nil || live[i].Endpoint.StartedAt.Before(first.Endpoint.StartedAt) {
			first = &live[i]
		}
	}
	return first
}

// runKey names one supervisor run of one file.
func runKey(d endpoints.Decision) string {
	e := d.Endpoint
	return d.File + " " + strconv.Itoa(e.RestartCount) + " " + e.RunID
}

// memFile is the tier memory's file in the state dir.
const memFile = "tiers.json"

// loadMem reads the tier memory; a missing file is an empty memory, an
// unreadable one too (it is a refinement: estimates are unknown until it
// fills again), with the error for a log line.
func loadMem(dir string) (map[string]tierMem, error) {
	mem := map[string]tierMem{}
	if dir == "" {
		return mem, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, memFile))
	if errors.Is(err, fs.ErrNotExist) {
		return mem, nil
	}
	if err != nil {
		return mem, err
	}
	if err := json.Unmarshal(b, &mem); err != nil {
		return map[string]tierMem{}, err
	}
	return mem, nil
}

// saveMem writes the tier memory atomically (unchanged bytes: no write).
func saveMem(dir string, mem map[string]tierMem) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsutil.WriteJSON(filepath.Join(dir, memFile), mem, 0o644)
}

// cloneMem copies the map (values are copied by observeTier as it goes).
func cloneMem(m map[string]tierMem) map[string]tierMem { return maps.Clone(m) }
