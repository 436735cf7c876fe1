package upstreams

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/fsutil"
)

// Resolver looks up a host name; *net.Resolver implements it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Options are what an Updater needs besides its config. Nil fields get the
// real thing: ExecRunner, net.DefaultResolver, time.Now, a null logger, new
// Metrics. A nil Checker means the scheduler is not asked.
type Options struct {
	Log       hclog.Logger
	Checker   endpoints.JobChecker
	Resolver  Resolver
	Runner    Runner
	Now       func() time.Time
	Metrics   *Metrics
	Generator string
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
	// resolved is each host name's last good lookup, used while the
	// resolver fails for a reason other than "no such host".
	resolved map[string][]string
}

// TierReport is what one tier routes to after a pass.
type TierReport struct {
	Tier     string   `json:"tier"`
	ServedBy string   `json:"served_by"`
	Servers  []string `json:"servers"`
	File     string   `json:"file"`
	// InSync reports whether the file on disk holds the rendered bytes.
	InSync bool `json:"in_sync"`
}

// Report is what a pass (or status) saw and did.
type Report struct {
	Time           time.Time            `json:"time"`
	Duration       time.Duration        `json:"duration_ns"`
	Scan           endpoints.Scan       `json:"scan"`
	Decisions      []endpoints.Decision `json:"decisions"`
	SchedulerError string               `json:"scheduler_error,omitempty"`
	Tiers          []TierReport         `json:"tiers"`
	Changed        []string             `json:"changed,omitempty"`
	Reloaded       bool                 `json:"reloaded"`
}

// New returns an Updater for cfg.
func New(cfg Config, opts Options) *Updater {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Runner == nil {
		opts.Runner = ExecRunner{Timeout: cfg.Nginx.Timeout}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = &Metrics{}
	}
	if opts.Generator == "" {
		opts.Generator = "llm-upstreams"
	}
	return &Updater{cfg: cfg, opts: opts}
}

// Config returns the config in use.
func (u *Updater) Config() Config { return u.cfg }

// Metrics returns the updater's metrics.
func (u *Updater) Metrics() *Metrics { return u.opts.Metrics }

// SetConfig replaces the config (SIGHUP). Fences are kept.
func (u *Updater) SetConfig(cfg Config) {
	u.cfg = cfg
	u.opts.Runner = replaceTimeout(u.opts.Runner, cfg.Nginx.Timeout)
}

// replaceTimeout keeps an ExecRunner's timeout in step with the config.
func replaceTimeout(r Runner, d time.Duration) Runner {
	if _, ok := r.(ExecRunner); ok {
		return ExecRunner{Timeout: d}
	}
	return r
}

// Pass runs one full pass under the lock: read, decide, render, apply.
// The report is filled as far as the pass got. Metrics (and the textfile,
// if configured) are updated whatever the outcome.
func (u *Updater) Pass(ctx context.Context) (Report, error) {
	start := u.opts.Now()
	rep, err := u.pass(ctx)
	rep.Duration = u.opts.Now().Sub(start)
	if err != nil {
		u.opts.Log.Error("pass failed", "error", err)
	}
	u.opts.Metrics.Record(rep, err)
	if path := u.cfg.Metrics.Textfile; path != "" {
		if werr := u.opts.Metrics.WriteTextfile(path); werr != nil {
			u.opts.Log.Warn("metrics textfile", "error", werr)
		}
	}
	return rep, err
}

// pass is Pass without the bookkeeping.
func (u *Updater) pass(ctx context.Context) (Report, error) {
	lctx, cancel := context.WithTimeout(ctx, u.cfg.LockTimeout)
	defer cancel()
	unlock, err := fsutil.Lock(lctx, u.cfg.LockFile)
	if err != nil {
		return Report{Time: u.opts.Now()}, err
	}
	defer unlock()
	rep, ups, err := u.Evaluate(ctx)
	if err != nil {
		return rep, err
	}
	u.saveFences(rep.Scan.Entries)
	a := &Applier{Dir: u.cfg.OutputDir, Test: u.cfg.Nginx.Test, Reload: u.cfg.Nginx.Reload,
		Runner: u.opts.Runner, Log: u.opts.Log}
	res, err := a.Apply(ctx, ups)
	rep.Changed, rep.Reloaded = res.Changed, res.Reloaded
	if err == nil {
		for i := range rep.Tiers {
			rep.Tiers[i].InSync = true
		}
	}
	return rep, err
}

// Evaluate reads the endpoint dir, decides what is live, resolves hosts and
// renders the files, without writing anything. Status uses it alone.
func (u *Updater) Evaluate(ctx context.Context) (Report, []endpoints.Upstream, error) {
	now := u.opts.Now()
	rep := Report{Time: now}
	scan, err := endpoints.ReadDir(u.cfg.EndpointDir, endpoints.ReadOptions{
		AllowedUIDs: u.cfg.AllowedUIDs, MaxFileSize: u.cfg.MaxFileSize})
	if err != nil {
		return rep, nil, fmt.Errorf("pass: %w", err)
	}
	rep.Scan = scan
	u.logRejected(scan.Rejected)
	jobs := u.askScheduler(ctx, scan.Entries, now)
	if jobs.Err != nil {
		rep.SchedulerError = jobs.Err.Error()
		u.opts.Log.Warn("scheduler check failed; keeping entries unverified", "error", jobs.Err)
	}
	u.fences = u.loadFences()
	rep.Decisions = endpoints.Decide(scan.Entries, jobs, u.fences, now)
	for i := range rep.Decisions {
		if d := &rep.Decisions[i]; d.Live && !u.configured(d.Endpoint.Tier) {
			d.Live, d.Unverified, d.Why = false, false, "tier not configured"
		}
	}
	live := u.resolve(ctx, rep.Decisions)
	ups := endpoints.Render(u.cfg.TierSpecs(), live, endpoints.RenderMeta{
		Generator: u.opts.Generator, Source: u.cfg.EndpointDir})
	rep.Tiers = u.tierReports(ups, live)
	return rep, ups, nil
}

// configured reports whether tier is in the config.
func (u *Updater) configured(tier string) bool {
	_, ok := u.cfg.Tiers[tier]
	return ok
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

// askScheduler makes the pass's one scheduler call, if configured.
func (u *Updater) askScheduler(ctx context.Context, entries []endpoints.Entry, now time.Time) endpoints.JobStates {
	if !u.cfg.Scheduler.Check || u.opts.Checker == nil {
		return endpoints.JobStates{}
	}
	sctx, cancel := context.WithTimeout(ctx, u.cfg.Scheduler.Timeout)
	defer cancel()
	return endpoints.AskScheduler(sctx, u.opts.Checker, endpoints.Candidates(entries, now))
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

// tierReports summarises the rendered files; InSync compares with disk.
func (u *Updater) tierReports(ups []endpoints.Upstream, live map[string][]endpoints.Server) []TierReport {
	var out []TierReport
	for _, up := range ups {
		tr := TierReport{Tier: up.Tier, ServedBy: up.ServedBy, File: filepath.Join(u.cfg.OutputDir, up.File)}
		for _, s := range live[up.ServedBy] {
			tr.Servers = append(tr.Servers, s.Addr)
		}
		slices.Sort(tr.Servers)
		tr.Servers = slices.Compact(tr.Servers)
		if b, err := os.ReadFile(tr.File); err == nil && string(b) == string(up.Bytes) {
			tr.InSync = true
		}
		out = append(out, tr)
	}
	return out
}
