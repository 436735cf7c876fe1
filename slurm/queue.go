package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QueuedJob is one job as `squeue -O` lists it (see queueFormat): what the
// controller needs to release a requeued tier job at the right second, to
// say why a tier is down and when it is expected back, and to find the job
// that preempted it. Times are zero when Slurm prints N/A, NONE, Unknown
// or something this package cannot read: an unreadable time is unknown,
// never a guess.
type QueuedJob struct {
	ID    string
	State JobState
	// Reason is squeue's %r ("BeginTime", "Resources", "JobHeldAdmin",
	// "job_requeued_in_held_state", "None", …).
	Reason string
	// Submit is SubmitTime; a requeue rewrites it to the second the
	// requeue finished (measured, slurm/FACTS.md R2).
	Submit time.Time
	// Eligible is EligibleTime: a requeued job's is Submit + 121 s until
	// someone moves it.
	Eligible time.Time
	// Start is the actual start of a running job, or Slurm's estimate for
	// a pending one (zero when Slurm has none; a year or more ahead means
	// "no idea", see FACTS R4).
	Start time.Time
	// End is a running job's expected end by its time limit (zero without
	// a limit).
	End time.Time
	// Preempt is PreemptTime: set while a running job is being preempted.
	Preempt time.Time
	// Priority is 0 for a held job.
	Priority uint64
	// Restarts is RestartCnt: how often Slurm requeued the job.
	Restarts int
	// UID is the owner's numeric uid.
	UID uint32
	// Partition is the job's partition (the first, if it names several).
	Partition string
	// NodeList is the allocation's hostlist; empty while pending.
	NodeList string
	// Name is the job name (it may hold spaces).
	Name string
}

// queueFields are the squeue -O fields read into a QueuedJob, in order;
// Name comes last so that a name holding the separator stays whole. ":|"
// means "no padding, then a |" (measured on 22.05.8: no width means the
// value as is, not 20 columns, when a suffix follows).
var queueFields = []string{"JobID", "State", "Reason", "SubmitTime", "EligibleTime", "StartTime", "EndTime",
	"PreemptTime", "PriorityLong", "RestartCnt", "UserID", "Partition", "NodeList", "Name"}

// queueFormat is the -O argument: "JobID:|,State:|,…,Name:".
var queueFormat = func() string {
	parts := make([]string, len(queueFields))
	for i, f := range queueFields {
		parts[i] = f + ":|"
	}
	parts[len(parts)-1] = queueFields[len(queueFields)-1] + ":"
	return strings.Join(parts, ",")
}()

// QueueQuery selects the jobs Queue lists; empty fields do not filter.
type QueueQuery struct {
	// Names are job names (squeue -n).
	Names []string
	// User is a user name or uid (squeue -u).
	User string
	// States are job states (squeue -t), e.g. "RUNNING"; empty means
	// squeue's default (pending, running, completing…).
	States []string
}

// Queue lists jobs with one squeue call (`squeue -h [-n NAMES] [-u USER]
// [-t STATES] -O FIELDS`). Only a failure to ask gives an error (it wraps
// ErrUnavailable when Slurm did not answer); a line whose id, state, uid
// or restart count it cannot read makes the whole answer an error, so that
// nothing is decided on half of it. Unreadable times are zero (unknown).
func (c *Client) Queue(ctx context.Context, q QueueQuery) ([]QueuedJob, error) {
	argv := []string{c.squeue(), "-h"}
	if len(q.Names) > 0 {
		argv = append(argv, "-n", strings.Join(q.Names, ","))
	}
	if q.User != "" {
		argv = append(argv, "-u", q.User)
	}
	if len(q.States) > 0 {
		argv = append(argv, "-t", strings.Join(q.States, ","))
	}
	argv = append(argv, "-O", queueFormat)
	out, err := c.run(ctx, argv...)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	jobs, err := parseQueue(out, c.location())
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return jobs, nil
}

// parseQueue reads Queue's output, one job per line.
func parseQueue(out string, loc *time.Location) ([]QueuedJob, error) {
	var jobs []QueuedJob
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		j, err := parseQueueLine(line, loc)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// parseQueueLine reads one line of queueFields separated by '|'.
func parseQueueLine(line string, loc *time.Location) (QueuedJob, error) {
	f := strings.SplitN(line, "|", len(queueFields))
	if len(f) != len(queueFields) {
		return QueuedJob{}, fmt.Errorf("squeue line %q: want %d fields separated by |", truncate(line), len(queueFields))
	}
	for i := range f[:len(f)-1] {
		f[i] = strings.TrimSpace(f[i])
	}
	j := QueuedJob{ID: f[0], State: JobState(f[1]), Reason: f[2], Partition: firstOf(f[11]),
		NodeList: nullToEmpty(f[12]), Name: f[13]}
	if j.ID == "" || j.State == "" {
		return QueuedJob{}, fmt.Errorf("squeue line %q: no job id or state", truncate(line))
	}
	var err error
	if j.Restarts, err = strconv.Atoi(f[9]); err != nil {
		return QueuedJob{}, fmt.Errorf("squeue line %q: RestartCnt: %w", truncate(line), err)
	}
	uid, err := strconv.ParseUint(f[10], 10, 32)
	if err != nil {
		return QueuedJob{}, fmt.Errorf("squeue line %q: UserID: %w", truncate(line), err)
	}
	j.UID = uint32(uid)
	if j.Priority, err = strconv.ParseUint(f[8], 10, 64); err != nil {
		return QueuedJob{}, fmt.Errorf("squeue line %q: PriorityLong: %w", truncate(line), err)
	}
	for i, dst := range []*time.Time{&j.Submit, &j.Eligible, &j.Start, &j.End, &j.Preempt} {
		*dst = lenientTime(f[3+i], loc)
	}
	return j, nil
}

// lenientTime is parseSlurmTime with anything unreadable (and NONE) as
// zero: a time from Slurm that cannot be read is unknown.
func lenientTime(s string, loc *time.Location) time.Time {
	if s == "NONE" {
		return time.Time{}
	}
	t, err := parseSlurmTime(s, loc)
	if err != nil {
		return time.Time{}
	}
	return t
}

// firstOf is the first of a comma-separated list.
func firstOf(s string) string {
	first, _, _ := strings.Cut(s, ",")
	return first
}

// Held reports whether someone holds the job: an admin (JobHeldAdmin), its
// owner (JobHeldUser) or a requeue-hold (job_requeued_in_held_state), or
// its priority is 0, which every hold sets (measured, FACTS R3).
func (j QueuedJob) Held() bool {
	switch j.Reason {
	case "JobHeldAdmin", "JobHeldUser", "job_requeued_in_held_state", "job requeued in held state":
		return true
	}
	return j.Priority == 0 && j.State == JobPending
}

// Partition is what the controller needs of a partition: its
// PriorityTier (a job of a higher tier preempts one of a lower).
type Partition struct {
	Name         string
	PriorityTier int
	// Nodes are the partition's nodes, expanded (the grow check: a job
	// pending in a partition that holds a node is waiting for that node).
	Nodes []string
}

// Partitions lists the partitions with one `scontrol -o show partition`.
func (c *Client) Partitions(ctx context.Context) (map[string]Partition, error) {
	out, err := c.run(ctx, c.scontrol(), "-o", "show", "partition")
	if err != nil {
		return nil, fmt.Errorf("partitions: %w", err)
	}
	parts := map[string]Partition{}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		kv := parseKeyValues(line)
		name := kv["PartitionName"]
		if name == "" {
			return nil, fmt.Errorf("partitions: no PartitionName in %q", truncate(line))
		}
		tier, err := strconv.Atoi(kv["PriorityTier"])
		if err != nil {
			return nil, fmt.Errorf("partitions: %s: PriorityTier=%q: %w", name, kv["PriorityTier"], err)
		}
		nodes, err := ExpandHostlist(nullToEmpty(kv["Nodes"]))
		if err != nil {
			return nil, fmt.Errorf("partitions: %s: Nodes=%q: %w", name, kv["Nodes"], err)
		}
		parts[name] = Partition{Name: name, PriorityTier: tier, Nodes: nodes}
	}
	if len(parts) == 0 {
		return nil, errors.New("partitions: scontrol listed none")
	}
	return parts, nil
}
