package tiers

import (
	"maps"
	"slices"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/keeper"
	"slurm-llm/slurm"
)

// keeperTiers is what the keeper says of each tier now: its config and
// its state files (read without the keeper's lock; they are replaced by
// rename).
func (u *Updater) keeperTiers() map[string]keeperTier {
	u.refreshKeeper()
	out := map[string]keeperTier{}
	if u.keeper == nil {
		return out
	}
	store := keeper.NewStore(u.keeper.StateDir)
	for name, tc := range u.keeper.Tiers {
		st, err := store.Load(name)
		if err != nil {
			continue // unknown: say nothing about it
		}
		out[name] = keeperTier{Known: true, Enabled: st.IsEnabled(tc), By: st.EnabledBy(),
			Release: tc.Release && u.keeper.ReleaseInterval > 0, ReleaseWithin: u.keeper.ReleaseDelay + u.keeper.ReleaseInterval,
			RequeueHoldMax: u.keeper.RequeueHoldMax}
	}
	return out
}

// loadMemOnce reads the tier memory at the first pass.
func (u *Updater) loadMemOnce() {
	if u.mem != nil {
		return
	}
	mem, err := loadMem(u.cfg.StateDir)
	if err != nil {
		u.opts.Log.Warn("tier memory unreadable; starting afresh", "dir", u.cfg.StateDir, "error", err)
	}
	u.mem = mem
}

// tierViews computes each tier's view (in specs' order) and the tier
// memory after this pass (not yet current: see commitMem).
func (u *Updater) tierViews(specs []TierSpec, ds []endpoints.Decision, rejected []endpoints.Rejected,
	live map[string][]endpoints.Server, now time.Time) ([]TierView, map[string]tierMem) {
	u.loadMemOnce()
	mem := cloneMem(u.mem)
	keep := u.keeperTiers()
	byTier := map[string][]endpoints.Decision{}
	for _, d := range ds {
		byTier[d.Endpoint.Tier] = append(byTier[d.Endpoint.Tier], d)
	}
	asked := u.opts.Queue != nil && u.tiers.asked
	ans := u.tiers.last
	if ans.err == nil && u.sched.err != nil {
		// Not asked while the scheduler check fails (tiersDue): the last
		// answer is no longer news.
		ans = tierAnswer{err: u.sched.err, at: ans.at}
	}
	u.askAboutDrains(ds)
	views := make([]TierView, 0, len(specs))
	for _, ts := range specs {
		own := len(live[ts.Name]) > 0
		servedBy := ""
		switch {
		case own:
			servedBy = ts.Name
		case ts.Backup != "" && len(live[ts.Backup]) > 0:
			servedBy = ts.Backup
		}
		jobs := u.tierJobs(ts.Name, ans.jobs)
		var seen []slurm.QueuedJob
		if asked && ans.err == nil {
			seen = jobs
		}
		m := observeTier(mem[ts.Name], observeInput{Own: own, Live: liveOnly(byTier[ts.Name]), Decisions: byTier[ts.Name],
			Jobs: seen, WatchStart: u.started, Now: now, Samples: u.cfg.Outage.ReadySamples})
		mem[ts.Name] = m
		var rej []endpoints.Rejected
		for _, r := range rejected {
			if TierFileName(ts.Name, r.File) {
				rej = append(rej, r)
			}
		}
		views = append(views, computeView(viewInput{Tier: ts.Name, Own: own, ServedBy: servedBy, Decisions: byTier[ts.Name], Rejected: rej,
			Asked: asked, QueueErr: ans.err, Jobs: jobs, Running: ans.running, Partitions: u.tiers.parts,
			Keeper: keep[ts.Name], Mem: m, Now: now, Cfg: u.cfg.Outage}))
	}
	return views, mem
}

// askAboutDrains asks the tier questions at once (not at the next sweep)
// when a file began to drain without saying why ("shutdown": its
// supervisor asks Slurm too): Slurm's answer tells a preemption from an
// end, so the 503 says "preempted" a fraction of a second later rather
// than a sweep later. Once per run.
func (u *Updater) askAboutDrains(ds []endpoints.Decision) {
	seen := map[string]bool{}
	for _, d := range ds {
		e := d.Endpoint
		if e.State != endpoints.StateDraining || e.Reason != "shutdown" {
			continue
		}
		key := d.File + " " + e.RunID
		seen[key] = true
		if !u.tiers.askedFor[key] {
			u.tiers.now = true
		}
	}
	u.tiers.askedFor = seen
}

// tierJobs keeps the listed jobs that are tier's: its job name, and an
// allowed owner (when owners are configured).
func (u *Updater) tierJobs(tier string, jobs []slurm.QueuedJob) []slurm.QueuedJob {
	name := u.cfg.Tiers[tier].JobName
	var out []slurm.QueuedJob
	for _, j := range jobs {
		if j.Name == name && (u.cfg.AllowAnyOwner || slices.Contains(u.cfg.AllowedUIDs, j.UID)) {
			out = append(out, j)
		}
	}
	return out
}

// liveOnly keeps the routed decisions.
func liveOnly(ds []endpoints.Decision) []endpoints.Decision {
	var out []endpoints.Decision
	for _, d := range ds {
		if d.Live {
			out = append(out, d)
		}
	}
	return out
}

// anyDown reports whether the last views have a tier not routed to its
// own endpoints.
func anyDown(views []TierView) bool {
	for _, v := range views {
		if v.State != StateRouted {
			return true
		}
	}
	return false
}

// tiersDue says whether to ask the tier questions now, with which names,
// and whether to ask for the running jobs and the partitions too (only
// while a tier is not routed: to name its preemptor).
func (u *Updater) tiersDue(now time.Time) (names []string, running, parts, due bool) {
	if u.opts.Queue == nil {
		return nil, false, false, false
	}
	var down bool
	if u.views != nil {
		down = anyDown(u.views)
	} else {
		u.loadMemOnce()
		down = anyDownMem(u.mem)
	}
	if u.sched.err != nil {
		// The scheduler check gets no answer and backs off: the tier
		// questions wait for it to answer again, so that an outage sees
		// one backing-off stream of squeue calls, not two.
		return nil, false, false, false
	}
	if !u.tiers.due(now, down, u.cfg.Scheduler.MaxAge, u.cfg.SweepInterval) {
		return nil, false, false, false
	}
	for _, name := range slices.Sorted(maps.Keys(u.cfg.Tiers)) {
		names = append(names, u.cfg.Tiers[name].JobName)
	}
	return names, down, down && u.tiers.needParts(now), true
}

// anyDownMem reports whether a tier's last recorded state is not routed.
func anyDownMem(mem map[string]tierMem) bool {
	for _, m := range mem {
		if m.State != StateRouted {
			return true
		}
	}
	return false
}

// keepTierAnswer records an answer to the tier questions and logs a change
// between answering and not.
func (u *Updater) keepTierAnswer(ans tierAnswer) {
	wasDown := u.tiers.asked && u.tiers.last.err != nil
	u.tiers.record(ans, u.cfg.Scheduler.MaxAge, u.cfg.Scheduler.BackoffMax)
	switch {
	case ans.err != nil && !wasDown:
		u.opts.Log.Warn("tier questions got no answer; reasons and estimates unknown", "error", ans.err,
			"retry_at", u.tiers.retryAt.UTC().Format(time.RFC3339))
	case ans.err == nil && wasDown:
		u.opts.Log.Info("tier questions answered again")
	}
}

// commitPass makes the memory of a pass that applied current (watch only):
// it records each tier whose state or reason changed, counts the outages
// that ended, updates the tier metrics and saves the memory.
func (u *Updater) commitPass(rep Report, err error) {
	if err != nil || u.next == nil {
		return // nginx did not take this pass: the next one sees it again
	}
	mem := u.next
	var ended []outageEnd
	var preempted []string
	for _, v := range rep.Views {
		before := mem[v.Tier].OutageCause
		m, ev, end := transition(mem[v.Tier], v, rep.Time)
		mem[v.Tier] = m
		if m.OutageCause == ReasonPreempted && before != ReasonPreempted {
			preempted = append(preempted, v.Tier)
		}
		if ev != nil {
			u.opts.Log.Info("tier state", "tier", v.Tier, "state", v.State, "reason", v.Reason, "job", v.Job,
				"expected_back", stampOrNone(v.ExpectedBack))
			u.appendRecord(*ev)
		}
		if end != nil {
			ended = append(ended, *end)
			u.opts.Log.Info("tier back", "tier", end.Tier, "outage", end.Duration.Round(time.Millisecond), "cause", end.Cause)
		}
	}
	u.mem, u.next = mem, nil
	starts := map[string]time.Time{}
	for tier, m := range mem {
		if !m.OutageStart.IsZero() {
			starts[tier] = m.OutageStart
		}
	}
	u.opts.Metrics.RecordViews(rep.Views, ended, preempted, rep.Time)
	u.opts.Metrics.RecordOutageStarts(starts)
	if u.cfg.StateDir != "" && !u.opts.ReadOnly { // the watcher's file: a front door only reads it
		if err := saveMem(u.cfg.StateDir, u.mem); err != nil {
			u.opts.Log.Warn("cannot save the tier memory", "dir", u.cfg.StateDir, "error", err)
		}
	}
}

// appendRecord appends to the availability record, when one is open.
func (u *Updater) appendRecord(ev RecordEvent) {
	if u.avail == nil {
		return
	}
	if err := u.avail.Append(ev); err != nil {
		u.opts.Log.Warn("availability record", "error", err)
		u.opts.Metrics.RecordRecordError()
	}
}

func stampOrNone(t *time.Time) string {
	if t == nil {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339)
}

// openRecord opens the availability record when a state dir is set and
// marks watch's start in it.
func (u *Updater) openRecord() {
	if u.cfg.StateDir == "" || u.opts.ReadOnly { // the watcher keeps the record
		return
	}
	r, err := OpenRecord(u.cfg.StateDir, u.cfg.Record.MaxSize)
	if err != nil {
		u.opts.Log.Warn("no availability record", "error", err)
		return
	}
	u.avail = r
	u.appendRecord(RecordEvent{Time: u.opts.Now(), Event: EventStart})
}

// closeRecord marks watch's stop and closes the record.
func (u *Updater) closeRecord() {
	if u.avail == nil {
		return
	}
	u.appendRecord(RecordEvent{Time: u.opts.Now(), Event: EventStop})
	if err := u.avail.Close(); err != nil {
		u.opts.Log.Warn("availability record", "error", err)
	}
	u.avail = nil
}
