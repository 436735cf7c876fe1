package tiers

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"slurm-llm/endpoints"
)

// Stale endpoint files. A supervisor that ends normally removes its file;
// one killed with SIGKILL (or whose node died) leaves it forever. Such a
// file is never routed (its lease ends), but it fills status and the
// directory. Watch removes it once the scheduler says its job is gone
// (unknown to squeue, or in a final state) and its lease ended
// stale.grace ago. A scheduler error, or a job it did not answer about,
// leaves every file alone; so does a file that changed since it was
// chosen.

// staleCand is an endpoint file that may be stale, and what it was when
// chosen.
type staleCand struct {
	File  string
	JobID string
	Lease time.Time
	id    fileID
}

// finalStates are the job states after which no run of the job can write
// its file again (a requeued job is PENDING, not listed here).
var finalStates = map[string]bool{"COMPLETED": true, "CANCELLED": true, "FAILED": true, "TIMEOUT": true,
	"PREEMPTED": true, "NODE_FAIL": true, "BOOT_FAIL": true, "DEADLINE": true, "OUT_OF_MEMORY": true, "REVOKED": true}

// staleCandidates are the entries not routed whose lease ended more than
// grace before now: the files worth asking the scheduler about.
func staleCandidates(ds []endpoints.Decision, now time.Time, grace time.Duration) []staleCand {
	var out []staleCand
	for _, d := range ds {
		if d.Live || !now.After(d.Endpoint.LeaseExpires.Add(grace)) {
			continue
		}
		out = append(out, staleCand{File: d.File, JobID: d.Endpoint.JobID, Lease: d.Endpoint.LeaseExpires})
	}
	return out
}

// staleToRemove is the pure verdict: the candidates whose job the
// scheduler says is gone (absent from its answer, or in a final state),
// with why. A scheduler error removes nothing.
func staleToRemove(cands []staleCand, jobs map[string]Job, schedErr error) (remove []staleCand, why []string) {
	if schedErr != nil {
		return nil, nil
	}
	for _, c := range cands {
		j, known := jobs[c.JobID]
		switch {
		case !known:
			remove, why = append(remove, c), append(why, "job unknown to Slurm")
		case finalStates[j.State]:
			remove, why = append(remove, c), append(why, "job "+j.State)
		}
	}
	return remove, why
}

// identify stats each candidate (without following a symlink) and keeps
// those whose identity it could read.
func identify(dir string, cands []staleCand) []staleCand {
	var out []staleCand
	for _, c := range cands {
		id, err := lstatID(filepath.Join(dir, c.File))
		if err != nil {
			continue
		}
		c.id = id
		out = append(out, c)
	}
	return out
}

// lstatID is a file's identity, as the scanner compares them.
func lstatID(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, //nolint:unconvert // Dev is uint32 on some platforms
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, nil
}

// staleAnswer is the scheduler's answer about the candidates' jobs.
type staleAnswer struct {
	cands []staleCand
	jobs  map[string]Job
	err   error
}

// removeStale removes the files the answer says are stale and unchanged
// since chosen, one log line each; failures are logged and counted.
func (u *Updater) removeStale(a staleAnswer) {
	if a.err != nil {
		u.opts.Log.Warn("stale endpoint files: scheduler did not answer; nothing removed", "error", a.err)
		return
	}
	remove, why := staleToRemove(a.cands, a.jobs, nil)
	removed, failed := 0, 0
	for i, c := range remove {
		path := filepath.Join(u.cfg.EndpointDir, c.File)
		if id, err := lstatID(path); err != nil || id != c.id {
			continue // gone or rewritten since: the next check sees it again
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed++
			u.opts.Log.Warn("stale endpoint file not removed", "file", c.File, "job_id", c.JobID, "why", why[i], "error", err)
			continue
		}
		removed++
		u.opts.Log.Info("stale endpoint file removed", "file", c.File, "job_id", c.JobID, "why", why[i],
			"lease_expired", c.Lease.UTC().Format(time.RFC3339), "grace", u.cfg.Stale.Grace)
	}
	u.opts.Metrics.RecordStale(removed, failed)
}
