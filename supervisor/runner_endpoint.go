package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"

	"github.com/hashicorp/go-hclog"
)

// endpoint returns the endpoint file content for the current state; ok is
// false in the terminal states, which have no file.
func (r *Runner) endpoint() (endpoints.Endpoint, bool) {
	st, ok := r.state.Endpoint()
	if !ok {
		return endpoints.Endpoint{}, false
	}
	now := r.clock.Now().UTC()
	models := r.models
	if models == nil {
		models = []string{}
	}
	return endpoints.Endpoint{
		Schema:       endpoints.SchemaVersion,
		Tier:         r.plan.Tier,
		JobID:        r.plan.JobID,
		RestartCount: r.plan.RestartCount,
		Host:         r.plan.EndpointHost,
		Port:         r.plan.EndpointPort,
		State:        st,
		Reason:       truncateReason(r.reason),
		Models:       models,
		Node:         r.plan.Head.Node,
		PID:          r.opts.PID,
		StartedAt:    r.startedAt.UTC(),
		Heartbeat:    now,
		LeaseExpires: now.Add(r.plan.Timeouts.Lease),
		RunID:        r.opts.RunID,
		InFlight:     r.inFlight,
		Term:         r.opts.Term,
		Serving:      r.opts.Serving,
	}, true
}

// writeEndpoint publishes the current state (heartbeat and state changes)
// off the Run goroutine: a slow or stalled shared file system must never
// hold supervision up. A failed write is logged and retried at the next
// heartbeat: the tier keeps serving.
func (r *Runner) writeEndpoint() {
	if e, ok := r.endpoint(); ok {
		r.pub.publish(e)
	}
}

// removeEndpoint deletes the endpoint file, if it is still this run's,
// and waits (bounded) for the writes before it and the removal to be done.
func (r *Runner) removeEndpoint() {
	r.pub.remove(r.plan.Tier, r.plan.JobID)
	ctx, cancel := context.WithTimeout(context.Background(), removeWait)
	defer cancel()
	if err := r.pub.wait(ctx); err != nil {
		r.log.Error("endpoint file not removed in time: storage slow; its lease will lapse", "wait", removeWait, "error", err)
	}
}

// removeWait bounds the wait for the endpoint file's removal at the end.
const removeWait = 10 * time.Second

// supersededMsg: the endpoint file belongs to a newer run of the job.
type supersededMsg struct{}

// handleSuperseded stops a run that learned it is stale: a newer run of
// its job (a later restart, or a later start of the same restart) owns the
// endpoint file, so Slurm has moved on and this run's nodes are not its own.
func (r *Runner) handleSuperseded() {
	if r.state.Terminal() || r.state == StateDraining {
		return
	}
	r.log.Error("a newer run of this job owns the endpoint file: this run is stale, stopping")
	r.handleStop(StopRequest{Reason: ReasonSuperseded, SkipDrain: true})
}

// publisher writes one run's endpoint file on a goroutine of its own
// (fsutil.Latest: the latest state wins, the runner never waits) and
// fences it: it never replaces nor removes a file that another run of the
// job wrote (see endpoints/FORMAT.md, "Writers").
type publisher struct {
	dir, runID string
	// hint is the controller's hint listener ("": none): told after every
	// write and removal, since its inotify cannot see this node's writes
	// on a shared file system.
	hint   string
	log    hclog.Logger
	latest *fsutil.Latest
	// superseded is called (once per write that found it) when the file
	// belongs to a newer run.
	superseded func()
}

func newPublisher(dir, runID, hint string, slow time.Duration, log hclog.Logger, superseded func()) *publisher {
	report := func(rep fsutil.Report) {
		switch {
		case rep.Running:
			log.Warn("endpoint write is slow: storage stalled?", "running_for", rep.Took.Round(time.Millisecond))
		case errors.Is(rep.Err, errNameTaken):
			log.Error("cannot publish the tier", "dir", dir, "error", rep.Err)
		case rep.Err != nil:
			log.Warn("cannot write endpoint file", "dir", dir, "took", rep.Took.Round(time.Millisecond), "error", rep.Err)
		default:
			log.Warn("endpoint write was slow", "took", rep.Took.Round(time.Millisecond))
		}
	}
	return &publisher{dir: dir, runID: runID, hint: hint, log: log, latest: fsutil.NewLatest(slow, report), superseded: superseded}
}

// errNameTaken: the endpoint file's name holds a file that is not this
// job's.
var errNameTaken = errors.New("endpoint file name taken")

// publish writes e unless the file belongs to a newer run.
func (p *publisher) publish(e endpoints.Endpoint) {
	p.latest.Do(func() error {
		cur, ok, err := p.current(e.Tier, e.JobID)
		if err != nil {
			// Only this job's account can write the file (the endpoint
			// directory is checked at start): a file there that is not
			// ours was made by someone with more rights, or before the
			// directory was fixed. Never trusted, never replaced.
			return fmt.Errorf("%w: %s is not this job's (%v): the name was taken by someone else; the tier is not published until root removes it",
				errNameTaken, endpoints.FileName(e.Tier, e.JobID), err)
		}
		if ok && newerRun(cur, e) {
			p.superseded()
			return nil
		}
		if err := endpoints.Write(p.dir, e); err != nil {
			return err
		}
		p.tell(e.Tier, e.JobID)
		return nil
	})
}

// hintTimeout bounds sending one hint (a datagram: normally microseconds).
const hintTimeout = time.Second

// tell sends the controller a hint, if one is configured. A hint that
// cannot be sent is logged at debug level: the controller's sweep routes
// the change anyway, a second later.
func (p *publisher) tell(tier, jobID string) {
	if p.hint == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hintTimeout)
	defer cancel()
	if err := endpoints.SendHint(ctx, p.hint, tier, jobID); err != nil {
		p.log.Debug("hint not sent", "to", p.hint, "error", err)
	}
}

// remove deletes the file of tier and job if this run wrote it (or it is
// gone, or unreadable: not another run's).
func (p *publisher) remove(tier, jobID string) {
	p.latest.Do(func() error {
		cur, ok, err := p.current(tier, jobID)
		if err != nil {
			p.log.Warn("endpoint file left in place: it is not this job's", "error", err)
			return nil
		}
		if ok && cur.RunID != p.runID {
			p.log.Info("endpoint file left in place: another run of the job wrote it", "run_id", cur.RunID, "restart_count", cur.RestartCount)
			return nil
		}
		if err := endpoints.Remove(p.dir, tier, jobID); err != nil {
			return err
		}
		p.log.Info("endpoint file removed")
		p.tell(tier, jobID)
		return nil
	})
}

// wait blocks until every queued write is done, or ctx ends.
func (p *publisher) wait(ctx context.Context) error { return p.latest.Wait(ctx) }

// current reads the endpoint file of tier and job as it stands; ok is
// false when it is absent or not a valid endpoint file.
func (p *publisher) current(tier, jobID string) (endpoints.Endpoint, bool, error) {
	e, err := endpoints.ReadFile(filepath.Join(p.dir, endpoints.FileName(tier, jobID)),
		endpoints.ReadOptions{AllowedUIDs: []uint32{uint32(os.Getuid())}})
	if errors.Is(err, endpoints.ErrNotOurs) {
		return endpoints.Endpoint{}, false, err
	}
	return e, err == nil, nil
}

// newerRun reports whether the file cur was written by a newer run of the
// job than ours: a higher restart count, or the same restart started later
// by another supervisor.
func newerRun(cur, ours endpoints.Endpoint) bool {
	if cur.RunID == ours.RunID {
		return false
	}
	if cur.RestartCount != ours.RestartCount {
		return cur.RestartCount > ours.RestartCount
	}
	return cur.StartedAt.After(ours.StartedAt)
}

// truncateReason keeps a reason within the endpoint format's limit and
// printable (exit causes may quote process output).
func truncateReason(s string) string {
	const max = 200
	s = strings.Map(func(c rune) rune {
		if !unicode.IsPrint(c) {
			return ' '
		}
		return c
	}, s)
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
