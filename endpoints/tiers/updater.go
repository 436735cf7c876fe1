package tiers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
	"slurm-llm/endpoints/keeper"
)

// Resolver looks up a host name; *net.Resolver implements it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Options are what an Updater needs besides its config. Nil fields get the
// real thing: net.DefaultResolver, time.Now, a null logger, new Metrics.
// A nil Scheduler means the scheduler is not asked.
type Options struct {
	Log       hclog.Logger
	Scheduler Scheduler
	// Queue answers the tier views' questions (the tiers' jobs, their
	// estimates, the preemptor); nil means it is not asked, and a tier
	// with nothing live says only what its endpoint files say.
	Queue    Queue
	Resolver Resolver
	Now      func() time.Time
	Metrics  *Metrics
	// Consumers take each pass's report, in order (consumer.go): the
	// watcher's nginx (endpoints/nginx.Site), the front door's routing
	// table (endpoints/front.Server).
	Consumers []Consumer
	// ReadOnly makes the updater a front door's: its passes take no lock
	// and write nothing of the watcher's: no fence file, no availability
	// record, no stale removal, no metrics textfile; the tier memory is
	// read from state_dir (the watcher's) and kept in memory only.
	ReadOnly bool
}

// Updater runs passes. It is owned by one goroutine (sync runs one pass;
// watch runs them all from its loop); it is not safe for concurrent use.
type Updater struct {
	cfg    Config
	opts   Options
	fences map[string]int
	// rejected is the last pass's rejections (file → reason), so a bad file
	// is logged when it appears or changes, not on every sweep.
	rejected map[string]string
	// skipped is the last pass's count of files left unread (max_files).
	skipped int
	// resolved is each host name's last good lookup, used while the
	// resolver fails for a reason other than "no such host".
	resolved map[string][]string
	// scanner keeps what each endpoint file parsed to, so that a sweep
	// over unchanged files is cheap.
	scanner scanner
	// sched is the scheduler's last answer, or its outage and backoff.
	sched schedState
	// tiers is the tier questions' last answer, or their outage.
	tiers tierAsk
	// mem is each tier's memory (tiermem.go), loaded from state_dir at
	// the first pass; next is the memory after the last evaluation, made
	// current (and saved) by watch once its pass is done.
	mem, next map[string]tierMem
	// views and decisions are the last evaluation's.
	views     []TierView
	decisions []endpoints.Decision
	// keeper is the keeper's config, when keeper_config names one that
	// loaded; keeperFile follows that file (keeper.Follower).
	keeper     *keeper.Config
	keeperFile keeper.Follower
	// avail is the availability record, open while Watch runs with a
	// state_dir.
	avail *Record
	// started is when the updater was made: runs that started before it
	// give no start-to-routed sample.
	started time.Time
}

// TierReport is what one tier routes to after a pass.
type TierReport struct {
	Tier     string   `json:"tier"`
	ServedBy string   `json:"served_by"`
	Servers  []string `json:"servers"`
	// File is the tier's upstream file and InSync whether it holds what
	// this pass routes: the nginx consumer's to fill (a front door's
	// pass, in memory, is in sync as soon as it is decided).
	File   string `json:"file"`
	InSync bool   `json:"in_sync"`
}

// Report is what a pass (or status) saw and did.
type Report struct {
	Time      time.Time            `json:"time"`
	Duration  time.Duration        `json:"duration_ns"`
	Scan      endpoints.Scan       `json:"scan"`
	Decisions []endpoints.Decision `json:"decisions"`
	// SchedulerError is set while the scheduler does not answer: entries
	// are kept, unverified.
	SchedulerError string `json:"scheduler_error,omitempty"`
	// SchedulerRetry is when the scheduler is asked again (RFC 3339),
	// while it does not answer.
	SchedulerRetry string       `json:"scheduler_retry,omitempty"`
	Tiers          []TierReport `json:"tiers"`
	// Live is, per tier, the servers routed to its own endpoints (not
	// its backup's), from the decisions marked live; the front door
	// routes from it.
	Live map[string][]endpoints.Server `json:"-"`
	// Views say, per tier, whether it is routed, why not, its job and the
	// job that preempted it, and when it is expected back.
	Views []TierView `json:"views"`
	// TierQueueError is set while the tier questions get no answer.
	TierQueueError string `json:"tier_queue_error,omitempty"`
	// Source is the endpoint directory the pass read.
	Source string `json:"-"`
	// Changed and Reloaded are the nginx consumer's: the upstream files
	// whose bytes changed and whether nginx was reloaded.
	Changed  []string `json:"changed,omitempty"`
	Reloaded bool     `json:"reloaded"`

	// SkippedFiles counts the endpoint files this pass left unread for
	// the max_files cap.
	SkippedFiles int `json:"skipped_files,omitempty"`
	// fenceable are the entries that passed every check: only they
	// count for the restart and term fences.
	fenceable []endpoints.Entry
}

// New returns an Updater for cfg.
func New(cfg Config, opts Options) *Updater {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = &Metrics{}
	}
	u := &Updater{cfg: cfg, opts: opts, started: opts.Now()}
	u.refreshKeeper()
	return u
}

// Config returns the config in use.
func (u *Updater) Config() Config { return u.cfg }

// Metrics returns the updater's metrics.
func (u *Updater) Metrics() *Metrics { return u.opts.Metrics }

// SetConfig replaces the config (SIGHUP). Fences are kept.
func (u *Updater) SetConfig(cfg Config) {
	u.cfg = cfg
	u.keeperFile.Reset() // read again, whatever the file's stamp
	u.refreshKeeper()
}

// refreshKeeper takes the keeper's config as it is now: every pass looks
// at keeper_config (one stat) and reads it again when it changed, so that
// a watcher or front door started before the file, or before a tier was
// added to it, follows it (keeper.Follower).
func (u *Updater) refreshKeeper() { u.keeper = u.keeperFile.Refresh(u.cfg.KeeperConfig, u.opts.Log) }

// Pass runs one full pass: first, without the lock, it asks the
// scheduler about the candidate jobs when due (so that a scheduler that
// does not answer never holds up another process's pass); then, under the
// lock, it reads and decides (leases at that moment) and hands the report
// to the consumers. The report is filled as far as the pass got. Metrics
// (and the textfile, if configured) are updated whatever the outcome.
func (u *Updater) Pass(ctx context.Context) (Report, error) {
	start := u.opts.Now()
	u.askIfDue(ctx)
	rep, err := u.pass(ctx)
	rep.Duration = u.opts.Now().Sub(start)
	u.record(rep, err)
	return rep, err
}

// pass runs one pass with the scheduler's state in hand: a front door's
// in memory, else under the lock.
func (u *Updater) pass(ctx context.Context) (Report, error) {
	if u.opts.ReadOnly {
		return u.readOnlyPass(ctx)
	}
	return u.lockedPass(ctx)
}

// record logs and counts a pass's outcome.
func (u *Updater) record(rep Report, err error) {
	if err != nil {
		u.opts.Log.Error("pass failed", "error", err)
	}
	u.opts.Metrics.Record(rep, err)
	if path := u.cfg.Metrics.Textfile; path != "" && !u.opts.ReadOnly { // the watcher's textfile
		if werr := u.opts.Metrics.WriteTextfile(path); werr != nil {
			u.opts.Log.Warn("metrics textfile", "error", werr)
		}
	}
}

// lockedPass reads, decides and hands the report to the consumers under
// the lock, with the scheduler's state in hand (it never waits on the
// scheduler): two processes' consumers never write at once, and the
// fences a pass saves are the ones it decided with.
func (u *Updater) lockedPass(ctx context.Context) (Report, error) {
	lctx, cancel := context.WithTimeout(ctx, u.cfg.LockTimeout)
	defer cancel()
	unlock, err := fsutil.Lock(lctx, u.cfg.LockFile)
	if err != nil {
		return Report{Time: u.opts.Now()}, err
	}
	defer unlock()
	rep, err := u.evaluate(ctx)
	if err != nil {
		return rep, err
	}
	u.saveFences(rep.fenceable)
	return rep, u.consume(ctx, &rep)
}

// readOnlyPass is a front door's pass: evaluate, keep the fences in
// memory and hand the report to the consumers; nothing is locked or
// written.
func (u *Updater) readOnlyPass(ctx context.Context) (Report, error) {
	rep, err := u.evaluate(ctx)
	if err != nil {
		return rep, err
	}
	u.fences = pruneFences(endpoints.LatestRestarts(rep.fenceable, u.fences), rep.Scan.Entries)
	for i := range rep.Tiers {
		rep.Tiers[i].InSync = true // in memory: what is routed is what was decided
	}
	return rep, u.consume(ctx, &rep)
}

// consume hands rep to each consumer in order; the first error ends the
// pass's hand-over (a later consumer keeps the last report it took).
func (u *Updater) consume(ctx context.Context, rep *Report) error {
	for _, c := range u.opts.Consumers {
		if err := c.Consume(ctx, rep); err != nil {
			return err
		}
	}
	return nil
}

// Evaluate asks the scheduler when due, then reads the endpoint dir and
// decides what is live and each tier's view, without handing the report
// to anyone, writing anything or taking the lock. Status uses it alone.
func (u *Updater) Evaluate(ctx context.Context) (Report, error) {
	u.askIfDue(ctx)
	return u.evaluate(ctx)
}

// evaluate is Evaluate with the scheduler's state in hand.
func (u *Updater) evaluate(ctx context.Context) (Report, error) {
	now := u.opts.Now()
	rep := Report{Time: now}
	res, err := u.scan()
	if err != nil {
		return rep, fmt.Errorf("pass: %w", err)
	}
	rep.Scan, rep.SkippedFiles = res.scan, res.skipped
	u.logRejected(res.scan.Rejected)
	u.logSkipped(res.skipped)
	jobs, pending := u.jobStates(res.scan.Entries, now)
	if jobs.Err != nil {
		rep.SchedulerError = jobs.Err.Error()
		rep.SchedulerRetry = u.sched.retryAt.UTC().Format(time.RFC3339)
	}
	u.fences = u.loadFences()
	opts := endpoints.DecideOptions{Skew: u.cfg.ClockSkew, Trusted: u.trusted(jobs, pending, res.owners)}
	rep.fenceable = endpoints.Fenceable(res.scan.Entries, now, opts)
	rep.Decisions = endpoints.DecideWith(res.scan.Entries, jobs, u.fences, now, opts)
	u.checkJobs(rep.Decisions, jobs, pending, res.owners)
	live := u.resolve(ctx, rep.Decisions)
	rep.Views, u.next = u.tierViews(u.cfg.TierSpecs(), rep.Decisions, res.scan.Rejected, live, now)
	u.views, u.decisions = rep.Views, rep.Decisions
	if err := u.tiers.last.err; err != nil {
		rep.TierQueueError = err.Error()
	}
	rep.Tiers = tierReports(rep.Views, live)
	rep.Live = live
	rep.Source = u.cfg.EndpointDir
	return rep, nil
}

// scan reads the endpoint dir through the updater's cache.
func (u *Updater) scan() (scanResult, error) {
	u.scanner.maxFiles, u.scanner.tiers = u.cfg.MaxFiles, slices.Sorted(maps.Keys(u.cfg.Tiers))
	return u.scanner.scan(u.cfg.EndpointDir, u.cfg.AllowedUIDs, u.cfg.MaxFileSize)
}

// checkJobs takes out of service, after Decide, what only this package
// knows of: a tier not configured; a job the scheduler was not asked about
// yet; a job owned by another user than the file's owner, or not named as
// its tier's jobs (so that a file cannot borrow another user's live job).
func (u *Updater) checkJobs(ds []endpoints.Decision, jobs endpoints.JobStates, pending map[string]bool, owners map[string]uint32) {
	for i := range ds {
		d := &ds[i]
		tc, configured := u.cfg.Tiers[d.Endpoint.Tier]
		switch {
		case d.Why == endpoints.WhyGone && pending[d.Endpoint.JobID]:
			d.Why = WhyAwaitingScheduler
		case !d.Live:
		case !configured:
			d.Live, d.Unverified, d.Why = false, false, WhyNotConfigured
		case !jobs.Asked || jobs.Err != nil:
		default:
			if why := u.notTheTiersJob(d.Entry, tc, owners); why != "" {
				d.Live, d.Why = false, why
			}
		}
	}
}

// notTheTiersJob says why the scheduler's answer about en's job does not
// fit en ("" when it does): a job of another user than the file's owner,
// or not named as tc's jobs, so that a file cannot borrow another user's
// job. Callers ask only about a job the answer lists (a live decision's:
// Decide calls a missing one gone; trusted requires it listed). checkJobs
// and trusted share it, so what routes and what fences are one rule.
func (u *Updater) notTheTiersJob(en endpoints.Entry, tc TierConfig, owners map[string]uint32) string {
	job := u.sched.jobs[en.Endpoint.JobID]
	switch {
	case job.UID != owners[en.File]:
		return whyWrongOwner(job, owners[en.File])
	case !tc.IsTierJob(job.Name):
		return whyWrongName(job, tc.JobName)
	}
	return ""
}

// trusted is the check an entry must pass to fence others (issue 23): a
// configured tier, and, once the scheduler has answered about its job, a
// job that runs or waits under the file's owner with its tier's job name;
// a job the scheduler has not been asked about yet is trusted until it
// answers (a new leader's file fences the old one at once), and so is
// every entry while the scheduler does not answer (nothing to check
// against; the owner allow list still applies). With allow_any_owner, a
// forged file with a huge term or restart count so fences for at most the
// pass before the scheduler's answer, where it fenced for ever before.
func (u *Updater) trusted(jobs endpoints.JobStates, pending map[string]bool, owners map[string]uint32) func(endpoints.Entry) bool {
	return func(en endpoints.Entry) bool {
		tc, configured := u.cfg.Tiers[en.Endpoint.Tier]
		switch {
		case !configured:
			return false
		case !jobs.Asked || jobs.Err != nil || pending[en.Endpoint.JobID]:
			return true
		}
		_, known := u.sched.jobs[en.Endpoint.JobID]
		return known && u.notTheTiersJob(en, tc, owners) == ""
	}
}

// logSkipped warns when the max_files cap leaves files unread, once per
// change of the count.
func (u *Updater) logSkipped(n int) {
	if n > 0 && n != u.skipped {
		u.opts.Log.Warn("endpoint directory holds more files than max_files: the rest are not read (the configured tiers' names first)",
			"max_files", u.cfg.MaxFiles, "not_read", n)
	}
	u.skipped = n
}

// logRejected warns about each rejected file whose reason is new since the
// last pass, and remembers this pass's set.
func (u *Updater) logRejected(rs []endpoints.Rejected) {
	now := make(map[string]string, len(rs))
	for _, r := range rs {
		now[r.File] = r.Reason
		if u.rejected[r.File] != r.Reason {
			u.opts.Log.Warn("endpoint file rejected", "file", r.File, "reason", r.Reason)
		}
	}
	u.rejected = now
}

// jobStates is the scheduler's state for the candidates of entries at
// now, and the candidates not asked about yet.
func (u *Updater) jobStates(entries []endpoints.Entry, now time.Time) (endpoints.JobStates, map[string]bool) {
	if !u.cfg.Scheduler.Check || u.opts.Scheduler == nil {
		return endpoints.JobStates{}, nil
	}
	return u.sched.view(endpoints.Candidates(entries, now))
}

// schedulerDue returns the candidate jobs to ask the scheduler about now,
// if a call is due (see schedState.due); entries are the last scan's.
func (u *Updater) schedulerDue(entries []endpoints.Entry, now time.Time) ([]string, bool) {
	if !u.cfg.Scheduler.Check || u.opts.Scheduler == nil {
		return nil, false
	}
	cands := endpoints.Candidates(entries, now)
	return cands, u.sched.due(cands, now, u.cfg.Scheduler.MaxAge)
}

// askIfDue scans the endpoint dir and, when a call is due, asks the
// scheduler and keeps its answer; then the tier questions, unless the
// scheduler just did not answer: in a controller outage one call's
// timeout serves the pass (the views say the scheduler is unknown), not
// two in a row. It takes no lock.
func (u *Updater) askIfDue(ctx context.Context) {
	if res, err := u.scan(); err == nil { // else the pass reports it
		if ids, due := u.schedulerDue(res.scan.Entries, u.opts.Now()); due {
			jobs, err := askScheduler(ctx, u.opts.Scheduler, u.cfg.Scheduler.Timeout, ids)
			u.keepAnswer(ids, jobs, err)
		}
	}
	if names, running, parts, due := u.tiersDue(u.opts.Now()); due {
		u.keepTierAnswer(askTiers(ctx, u.opts.Queue, u.cfg.Scheduler.Timeout, names, running, parts, u.opts.Now))
	}
}

// askScheduler makes one scheduler call about ids, bounded by timeout. It
// touches nothing of the updater: watch runs it in its own goroutine.
func askScheduler(ctx context.Context, s Scheduler, timeout time.Duration, ids []string) (map[string]Job, error) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	jobs, err := s.Jobs(sctx, ids)
	if err != nil {
		return nil, fmt.Errorf("ask scheduler about %d jobs: %w", len(ids), err)
	}
	return jobs, nil
}

// keepAnswer records a scheduler call's outcome and logs a change between
// answering and not.
func (u *Updater) keepAnswer(ids []string, jobs map[string]Job, err error) {
	wasDown := u.sched.err != nil
	u.sched.record(ids, jobs, err, u.opts.Now(), u.cfg.Scheduler.MaxAge, u.cfg.Scheduler.BackoffMax)
	u.opts.Metrics.RecordSchedulerCall(err)
	switch {
	case err != nil:
		u.opts.Log.Warn("scheduler check failed; keeping entries unverified", "error", err,
			"failures", u.sched.failures, "retry_at", u.sched.retryAt.UTC().Format(time.RFC3339))
	case wasDown:
		u.opts.Log.Info("scheduler answers again", "jobs", len(ids))
	}
}

// resolve turns each live decision into servers. A host name that does not
// resolve (to IP addresses) drops its entry, so nginx never sees a name
// that would fail its config test and block every tier; so does an address
// outside allowed_networks (a job cannot point a tier at, say, the
// controller's own loopback services).
func (u *Updater) resolve(ctx context.Context, ds []endpoints.Decision) map[string][]endpoints.Server {
	live := map[string][]endpoints.Server{}
	for i := range ds {
		d := &ds[i]
		if !d.Live {
			continue
		}
		addrs, err := u.lookup(ctx, d.Endpoint.Host)
		if err != nil {
			d.Live, d.Unverified, d.Why = false, false, "host does not resolve"
			u.opts.Log.Warn("endpoint host does not resolve", "file", d.File, "error", err)
			continue
		}
		if addrs = u.allowed(addrs); len(addrs) == 0 {
			d.Live, d.Unverified, d.Why = false, false, "address not in allowed_networks"
			continue
		}
		for _, a := range addrs {
			live[d.Endpoint.Tier] = append(live[d.Endpoint.Tier], endpoints.ServerOf(*d, a))
		}
	}
	return live
}

// lookup returns the sorted IP addresses of host (itself if a literal).
// When the resolver fails for another reason than "no such host" (a
// timeout, a DNS server restarting), the host's last good addresses are
// used: a DNS hiccup must not empty every tier.
func (u *Updater) lookup(ctx context.Context, host string) ([]string, error) {
	if _, err := netip.ParseAddr(host); err == nil {
		return []string{host}, nil
	}
	addrs, err := u.resolveHost(ctx, host)
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		if u.resolved == nil {
			u.resolved = map[string][]string{}
		}
		u.resolved[host] = addrs
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		delete(u.resolved, host)
	case u.resolved[host] != nil:
		u.opts.Log.Warn("cannot resolve host: keeping its last addresses", "host", host, "addrs", u.resolved[host], "error", err)
		return u.resolved[host], nil
	}
	return addrs, err
}

// resolveHost asks the resolver once.
func (u *Updater) resolveHost(ctx context.Context, host string) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, u.cfg.ResolveTimeout)
	defer cancel()
	raw, err := u.opts.Resolver.LookupHost(lctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var addrs []string
	for _, a := range raw {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
			addrs = append(addrs, ip.String())
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no IP address", host)
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}

// allowed keeps the addresses inside the configured networks (all when
// none are configured).
func (u *Updater) allowed(addrs []string) []string {
	if len(u.cfg.AllowedPrefixes) == 0 {
		return addrs
	}
	var out []string
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		for _, p := range u.cfg.AllowedPrefixes {
			if p.Contains(ip.Unmap()) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// tierReports says, per tier in the views' order, which tier serves it
// and the addresses routed to; File and InSync are a consumer's to fill.
func tierReports(views []TierView, live map[string][]endpoints.Server) []TierReport {
	out := make([]TierReport, 0, len(views))
	for _, v := range views {
		tr := TierReport{Tier: v.Tier, ServedBy: v.ServedBy}
		for _, s := range live[v.ServedBy] {
			tr.Servers = append(tr.Servers, s.Addr)
		}
		slices.Sort(tr.Servers)
		tr.Servers = slices.Compact(tr.Servers)
		out = append(out, tr)
	}
	return out
}
