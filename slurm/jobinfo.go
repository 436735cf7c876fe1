package slurm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// JobState is a job's state as Slurm prints it (JobState= in scontrol,
// %T in squeue), such as "RUNNING". It is a string so that states this list
// does not name still come through.
type JobState string

// Job states the supervisor and its tests act on.
const (
	JobPending    JobState = "PENDING"
	JobRunning    JobState = "RUNNING"
	JobSuspended  JobState = "SUSPENDED"
	JobCompleting JobState = "COMPLETING"
	JobCompleted  JobState = "COMPLETED"
	JobCancelled  JobState = "CANCELLED"
	JobFailed     JobState = "FAILED"
	JobTimeout    JobState = "TIMEOUT"
	JobPreempted  JobState = "PREEMPTED"
	JobNodeFail   JobState = "NODE_FAIL"
	JobRequeued   JobState = "REQUEUED"
	// JobSignaling is shown for a moment when a job is picked for
	// preemption (measured: SIGNALING, then RUNNING again with PreemptTime
	// set, until the grace time ends). Test PreemptTime, not the state.
	JobSignaling JobState = "SIGNALING"
)

// Queued reports whether a job in state s waits in the queue: pending, or
// requeued on its way back to pending (REQUEUED, REQUEUE_HOLD, REQUEUE_FED).
func (s JobState) Queued() bool {
	switch s {
	case JobPending, JobRequeued, "REQUEUE_HOLD", "REQUEUE_FED":
		return true
	}
	return false
}

// JobInfo is the part of `scontrol show job` the supervisor uses. Times are
// zero when Slurm prints None, Unknown or N/A or leaves the field out (a
// requeued job has no BatchHost and no PreemptTime).
type JobInfo struct {
	JobID    string
	JobName  string
	State    JobState
	Reason   string
	Restarts int
	// PreemptTime is set from the moment the job is picked for preemption.
	PreemptTime time.Time
	// EligibleTime is when a pending job may start (about 120 s after a
	// requeue, until ReleaseNow).
	EligibleTime time.Time
	StartTime    time.Time
	EndTime      time.Time
	// TimeLimit is 0 for UNLIMITED.
	TimeLimit time.Duration
	// NodeList is the hostlist as Slurm prints it ("node[1-3]"); empty while
	// pending. Expand it with ExpandHostlist.
	NodeList  string
	BatchHost string
	Partition string
	// Requeue says whether Slurm may requeue the job (Requeue=1).
	Requeue bool
	// ExitCode is "status:signal", such as "0:0" or "0:15".
	ExitCode string
}

// parseKeyValues splits one line of `scontrol -o show …` output into fields.
// Values may contain spaces (Command=/path with space/x, OS=Linux 6.1 #1 SMP):
// a word starts a new field only if it looks like a Slurm key, an upper-case
// letter then letters, digits, '_', '/' or ':', then '='; any other word
// continues the previous value. The first occurrence of a key wins, so text
// inside a late free-form value (Comment=, Command=) cannot override an
// earlier field. A job name containing " Key=" can still confuse it.
func parseKeyValues(line string) map[string]string {
	fields := map[string]string{}
	key := ""
	for _, word := range strings.Split(strings.TrimRight(line, "\r\n"), " ") {
		if k, v, ok := splitKey(word); ok {
			key = k
			if _, seen := fields[key]; !seen {
				fields[key] = v
			} else {
				key = "" // a repeated key: its text belongs nowhere we read
			}
			continue
		}
		if key != "" && word != "" {
			fields[key] += " " + word
		}
	}
	return fields
}

func splitKey(word string) (key, value string, ok bool) {
	k, v, found := strings.Cut(word, "=")
	if !found || k == "" || k[0] < 'A' || k[0] > 'Z' {
		return "", "", false
	}
	for _, c := range k {
		ok := c == '_' || c == '/' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !ok {
			return "", "", false
		}
	}
	return k, v, true
}

// parseShowJob reads one line of `scontrol -o show job`; loc is the zone
// Slurm prints times in (the controller's local time, without an offset).
func parseShowJob(line string, loc *time.Location) (JobInfo, error) {
	f := parseKeyValues(line)
	if f["JobId"] == "" {
		return JobInfo{}, fmt.Errorf("parse scontrol show job: no JobId in %q", truncate(line))
	}
	j := JobInfo{
		JobID: f["JobId"], JobName: f["JobName"], State: JobState(f["JobState"]), Reason: f["Reason"],
		NodeList: nullToEmpty(f["NodeList"]), BatchHost: nullToEmpty(f["BatchHost"]),
		Partition: f["Partition"], Requeue: f["Requeue"] == "1", ExitCode: f["ExitCode"],
	}
	var err error
	if j.Restarts, err = strconv.Atoi(f["Restarts"]); err != nil {
		return JobInfo{}, fmt.Errorf("parse scontrol show job %s: Restarts=%q: %w", j.JobID, f["Restarts"], err)
	}
	if j.TimeLimit, err = parseTimeLimit(f["TimeLimit"]); err != nil {
		return JobInfo{}, fmt.Errorf("parse scontrol show job %s: %w", j.JobID, err)
	}
	times := []struct {
		key string
		dst *time.Time
	}{{"PreemptTime", &j.PreemptTime}, {"EligibleTime", &j.EligibleTime}, {"StartTime", &j.StartTime}, {"EndTime", &j.EndTime}}
	for _, t := range times {
		if *t.dst, err = parseSlurmTime(f[t.key], loc); err != nil {
			return JobInfo{}, fmt.Errorf("parse scontrol show job %s: %s: %w", j.JobID, t.key, err)
		}
	}
	return j, nil
}

func nullToEmpty(s string) string {
	if s == "(null)" {
		return ""
	}
	return s
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// parseSlurmTime parses "2026-11-21T23:51:08"; None, Unknown, N/A and ""
// give the zero time.
func parseSlurmTime(s string, loc *time.Location) (time.Time, error) {
	switch s {
	case "", "None", "Unknown", "N/A", "(null)":
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	return t, nil
}

// parseTimeLimit parses Slurm's [days-]hours:minutes:seconds; UNLIMITED
// (and the other no-limit words) give 0.
func parseTimeLimit(s string) (time.Duration, error) {
	switch s {
	case "UNLIMITED", "Partition_Limit", "NONE", "":
		return 0, nil
	}
	days := 0
	rest := s
	if d, r, ok := strings.Cut(s, "-"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("TimeLimit=%q: bad days", s)
		}
		days, rest = n, r
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("TimeLimit=%q: want [days-]hours:minutes:seconds", s)
	}
	total := time.Duration(days) * 24 * time.Hour
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("TimeLimit=%q: bad number %q", s, parts[i])
		}
		total += time.Duration(n) * unit
	}
	return total, nil
}
