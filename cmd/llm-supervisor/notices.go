package main

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/slurm"
	"slurm-llm/supervisor"
)

// classifyTimeout bounds the scontrol call that says why the run ends.
const classifyTimeout = 5 * time.Second

// notice is one stop notice: a signal to the supervisor itself, or a
// step's shim reporting that Slurm signalled its step (preemption, cancel).
type notice struct {
	// signal is "SIGTERM", "SIGINT", "SIGUSR1", or "" for a shim's report.
	signal string
}

// stopper turns notices into stop requests: the first asks for an ordered
// stop at once (the endpoint goes draining), then asks Slurm why and
// republishes the reason; a second signal to the supervisor skips the wait
// for requests in flight. It remembers what must follow the drain.
type stopper struct {
	runner   interface{ Stop(supervisor.StopRequest) }
	classify func(ctx context.Context, n notice) supervisor.NoticeDecision
	log      hclog.Logger

	mu       sync.Mutex
	decision *supervisor.NoticeDecision
	signals  int
}

// handle takes one notice; it runs on the goroutine that reads notices.
func (s *stopper) handle(ctx context.Context, n notice) {
	s.mu.Lock()
	first := s.decision == nil && s.signals == 0
	if n.signal != "" {
		s.signals++
	}
	again := n.signal != "" && s.signals > 1
	s.mu.Unlock()
	s.log.Info("stop notice", "signal", n.signal, "from_shim", n.signal == "")
	switch {
	case again:
		s.runner.Stop(supervisor.StopRequest{Reason: supervisor.ReasonShutdown, SkipDrain: true})
	case first:
		s.runner.Stop(supervisor.StopRequest{Reason: supervisor.ReasonShutdown})
		cctx, cancel := context.WithTimeout(ctx, classifyTimeout)
		d := s.classify(cctx, n)
		cancel()
		s.log.Info("run ending", "cause", d.Cause, "after_drain", d.After, "why", d.Why)
		s.mu.Lock()
		s.decision = &d
		s.mu.Unlock()
		s.runner.Stop(supervisor.StopRequest{Reason: supervisor.StopReason(d.Cause)})
	}
}

// after returns what must follow the drain; ok is false when no notice came.
func (s *stopper) after() (supervisor.NoticeDecision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.decision == nil {
		return supervisor.NoticeDecision{}, false
	}
	return *s.decision, true
}

// slurmClassifier asks Slurm about the job and classifies the notice.
func slurmClassifier(client *slurm.Client, alloc slurm.Allocation) func(context.Context, notice) supervisor.NoticeDecision {
	return func(ctx context.Context, n notice) supervisor.NoticeDecision {
		f := supervisor.NoticeFacts{Signal: n.signal, ShimSignal: n.signal == "", RunRestarts: alloc.RestartCount}
		if info, err := client.ShowJob(ctx, alloc.JobID); err == nil {
			f.JobKnown, f.JobState, f.Reason = true, string(info.State), info.Reason
			f.Preempted, f.Restarts, f.Requeueable = !info.PreemptTime.IsZero(), info.Restarts, info.Requeue
		}
		return supervisor.ClassifyNotice(f)
	}
}

// signalName names the signals the supervisor catches.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	}
	return sig.String()
}
