package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/kvsave"
	"slurm-llm/health"
)

// savedMsg is the end of the saves of the head's slots at the drain.
type savedMsg struct {
	gen   int
	saved int
	err   error
}

// saveSlots starts the saves of the head's slots (life.go, endWait), on a
// goroutine, ending by the step's deadline; the answer comes back as a
// savedMsg.
func (r *Runner) saveSlots(by time.Time) {
	r.drain.saving = true
	now := r.clock.Now()
	r.log.Info("draining: saving the head's slots", "dir", r.plan.SlotSave.Dir, "until", by.Format(time.RFC3339Nano))
	s := slotSaver{
		client: r.opts.HTTPClient, base: health.BaseURL(r.head.spec.Addr, r.head.spec.Port),
		dir: r.plan.SlotSave.Dir, tier: r.plan.Tier, job: r.plan.JobID, argv: r.head.spec.Argv,
		bounds: kvsave.Bounds{TTL: r.plan.SlotSave.TTL, MaxBytes: r.plan.SlotSave.MaxBytes},
		now:    r.clock.Now, log: r.log,
	}
	// The deadline is on the runner's clock, as every other of its
	// decisions: a timer of its clock ends the saves' context.
	gen, timer := r.head.gen, r.clock.NewTimer(by.Sub(now))
	r.ask(func() any {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		defer timer.Stop()
		go func() {
			select {
			case <-timer.C():
				cancel(context.DeadlineExceeded)
			case <-ctx.Done():
			}
		}()
		n, err := s.save(ctx)
		if ctx.Err() != nil {
			err = errors.Join(err, context.Cause(ctx))
		}
		return savedMsg{gen: gen, saved: n, err: err}
	})
}

// handleSaved takes the end of the saves (life.go, onSaved).
func (r *Runner) handleSaved(m savedMsg) {
	if m.gen != r.head.gen {
		return
	}
	r.apply(onSaved(r.view(), m.saved, m.err))
}

// slotSaver saves a head's slots into its --slot-save-path. It runs off
// the Run goroutine and touches nothing of the runner.
type slotSaver struct {
	client         *http.Client
	base           string
	dir, tier, job string
	argv           []string
	bounds         kvsave.Bounds
	now            func() time.Time
	log            hclog.Logger
}

// save saves each idle slot that holds a conversation, then writes its
// index entry beside it; a busy slot is not saved (its save would wait
// for its answer's end). It first prunes the directory to its bounds.
// It returns how many were saved and the first failure (or the deadline).
func (s slotSaver) save(ctx context.Context) (int, error) {
	if removed, err := kvsave.Prune(s.dir, s.now(), s.bounds); err != nil || len(removed) > 0 {
		s.log.Info("slot save directory pruned", "removed", len(removed), "error", err)
	}
	identity, err := kvsave.Identity(s.argv)
	if err != nil {
		return 0, err
	}
	slots, err := kvsave.Slots(ctx, s.client, s.base, nil)
	if err != nil {
		return 0, err
	}
	saved := 0
	var errs []error
	for _, sl := range slots {
		if sl.IsProcessing {
			s.log.Warn("slot busy: not saved", "slot", sl.ID)
			continue
		}
		if !sl.Conversation() {
			continue
		}
		if err := s.saveOne(ctx, identity, sl); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		saved++
	}
	return saved, errors.Join(errs...)
}

// saveOne saves one slot and writes its index entry.
func (s slotSaver) saveOne(ctx context.Context, identity string, sl kvsave.Slot) error {
	key := kvsave.Key(sl.Prompt)
	file := kvsave.FileName(s.tier, identity, key, s.now())
	res, err := kvsave.Action(ctx, s.client, s.base, nil, "save", sl.ID, file)
	if err != nil {
		return err
	}
	e := kvsave.Entry{File: file, Tier: s.tier, JobID: s.job, Identity: identity, Key: key,
		Slot: sl.ID, Tokens: res.NSaved, Bytes: res.NWritten, SavedAt: s.now()}
	if err := kvsave.WriteEntry(s.dir, e); err != nil {
		return fmt.Errorf("slot %d: index: %w", sl.ID, err)
	}
	s.log.Info("slot saved", "slot", sl.ID, "file", file, "tokens", res.NSaved, "bytes", res.NWritten,
		"save_ms", res.Timings.SaveMS)
	return nil
}

// publishHead writes, off the Run goroutine, the head file the front door
// reads before it restores a saved slot on this head: its address and
// model identity (kvsave.Head), when the tier saves slots. It first prunes
// the directory to its bounds (slot_save_ttl, slot_save_max_bytes), as
// each drain's saves do.
func (r *Runner) publishHead() {
	ss := r.plan.SlotSave
	if ss.Dir == "" {
		return
	}
	argv, file, log := r.head.spec.Argv, endpoints.FileName(r.plan.Tier, r.plan.JobID), r.log
	addr := net.JoinHostPort(r.plan.EndpointHost, strconv.Itoa(r.plan.EndpointPort))
	bounds, now := kvsave.Bounds{TTL: ss.TTL, MaxBytes: ss.MaxBytes}, r.clock.Now
	r.ask(func() any {
		if removed, err := kvsave.Prune(ss.Dir, now(), bounds); err != nil || len(removed) > 0 {
			log.Info("slot save directory pruned", "removed", len(removed), "error", err)
		}
		identity, err := kvsave.Identity(argv)
		if err == nil {
			err = kvsave.WriteHead(ss.Dir, file, kvsave.Head{Addr: addr, Identity: identity})
		}
		if err != nil {
			log.Warn("head file not written: saved slots will not be restored on this head", "dir", ss.Dir, "error", err)
		}
		return nil
	})
}

// removeHead removes the head file at the run's end.
func (r *Runner) removeHead() {
	if dir := r.plan.SlotSave.Dir; dir != "" {
		if err := kvsave.RemoveHead(dir, endpoints.FileName(r.plan.Tier, r.plan.JobID)); err != nil {
			r.log.Warn("head file not removed", "error", err)
		}
	}
}
