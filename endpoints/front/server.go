package front

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/front/accesslog"
	"slurm-llm/endpoints/front/rawconn"
	"slurm-llm/endpoints/tiers"
)

// Options are what a Server needs besides its config. Nil fields get the
// real thing: a null logger, time.Now, new Metrics, a transport to the
// heads built from the config.
type Options struct {
	Log hclog.Logger
	// AccessLog receives one line per request; nil means none.
	AccessLog io.Writer
	Now       func() time.Time
	Metrics   *Metrics
	// Transport carries requests to the heads (tests inject faults).
	Transport http.RoundTripper
	// Access says who sent a request, applies the users' limits and fair
	// share, and records their use (issue 28); nil: nobody is known,
	// nothing limited, held requests go in arrival order.
	Access *access.Access
}

// Server is the front door: an http.Handler routing by model over the
// tables the updater's passes give it (Update). Safe for concurrent use.
type Server struct {
	opts    Options
	log     hclog.Logger
	metrics *Metrics
	cfg     atomic.Pointer[Config]
	tab     atomic.Pointer[table]
	rp      *httputil.ReverseProxy
	poller  poller
	rr      atomic.Uint64
	// access writes the access log off the answers' path (nil: none);
	// bodyBytes counts the request bodies held now (max_body_bytes_in_flight).
	access    *accesslog.Log
	bodyBytes atomic.Int64
	// affinity is each conversation's last head (affinity.go).
	affinity affinity
	// feedsDone ends the held /models/sse feeds (StopFeeds).
	feedsDone chan struct{}
	stopFeeds sync.Once
	// polled is signalled after a table with new heads, so their models
	// are read at once rather than at the next refresh.
	polled chan struct{}

	// catalog maps each model a routed head serves to its tier (the first
	// tier, in name order, when two serve one name): remade at every
	// table and after every read of the heads' models, read per request.
	catalog atomic.Pointer[map[string]string]
	queues  sync.Map // tier → *queue

	mu      sync.Mutex
	heads   map[string]*head  // the last table's heads, by key
	learned map[string]string // model → tier, from every file and head seen
	// reasonSince is, per tier that serves nothing (no head routed, none
	// draining: a draining head still serves its requests in flight, up
	// to its drain's deadline), since when its view has given its reason
	// (reason is that reason): hold_unknown counts from there.
	reasonSince map[string]time.Time
	reason      map[string]string
}

// New returns a front door serving cfg. It routes nothing until the first
// Update.
func New(cfg Config, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Transport == nil {
		opts.Transport = headTransport(cfg.ConnectTimeout)
	}
	s := &Server{opts: opts, log: opts.Log, metrics: opts.Metrics, polled: make(chan struct{}, 1), feedsDone: make(chan struct{}),
		heads: map[string]*head{}, learned: map[string]string{}, reasonSince: map[string]time.Time{}, reason: map[string]string{}}
	s.cfg.Store(&cfg)
	heads := func() []*head { return s.tab.Load().allHeads() }
	s.metrics.heads.Store(&heads)
	s.tab.Store(&table{heads: map[string][]*head{}, views: map[string]tiers.TierView{}})
	s.catalog.Store(&map[string]string{})
	s.rp = s.newProxy()
	if opts.AccessLog != nil {
		s.access = accesslog.New(opts.AccessLog, func() { s.metrics.accessDropped.Inc() })
	}
	if opts.Access != nil {
		s.metrics.reg.MustRegister(opts.Access.Collectors()...)
	}
	s.poller = poller{client: &http.Client{Transport: opts.Transport}, timeout: min(cfg.ModelsRefresh, 2*time.Second)}
	return s
}

// headTransport is the transport to the heads: a bounded connect (its
// connections' reads and writes raw system calls: package rawconn), many
// idle connections per head (a head serves many clients through one front
// door), idle ones dropped before llama-server's keep-alive timeout (5 s
// in cpp-httplib) would close them under a request.
func headTransport(connect time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:         rawconn.Dialer(&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}),
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     3 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Close writes the access lines still queued and stops their writer; call
// it once the listeners are shut down (requests still under way would
// have their lines lost).
func (s *Server) Close() {
	if s.access != nil {
		s.access.Close()
	}
}

// draining reports whether h's endpoint file now says draining.
func (s *Server) draining(h *head) bool { return s.tab.Load().drainingFiles[h.file] }

// Metrics returns the front door's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// SetConfig replaces the front door's settings (SIGHUP); the listeners
// stay as they are.
func (s *Server) SetConfig(cfg Config) {
	s.cfg.Store(&cfg)
	for _, q := range s.allQueues() {
		s.dispatch(q)
	}
}

// tierCfg is tier's settings (the defaults for a tier not configured).
func (s *Server) tierCfg(tier string) TierConfig { return s.cfg.Load().Tier(tier) }

// view is tier's view in the current table; a tier the passes never saw
// is down for an unknown reason.
func (s *Server) view(tier string) tiers.TierView {
	if v, ok := s.tab.Load().views[tier]; ok {
		return v
	}
	return tiers.TierView{Tier: tier, State: tiers.StateDown, Reason: tiers.ReasonNoEndpoint,
		RetryAfter: int(DefaultTier.Hold / time.Second)}
}

// Consume implements tiers.Consumer: the front door is a consumer of the
// core's passes, as nginx is (Update).
func (s *Server) Consume(_ context.Context, rep *tiers.Report) error {
	s.Update(*rep)
	return nil
}

// Update takes one pass's report: a new table replaces the old at once,
// the model catalogue learns what the files list, and every held request
// is looked at again.
func (s *Server) Update(rep tiers.Report) {
	s.mu.Lock()
	t, heads := buildTable(rep, s.heads)
	fresh := false
	for k := range heads {
		if s.heads[k] == nil {
			fresh = true
		}
	}
	s.heads = heads
	for tier, models := range t.fileModels {
		for _, m := range models {
			s.learnLocked(m, tier)
		}
	}
	for _, v := range rep.Views {
		switch {
		case t.routed(v.Tier) || len(t.draining[v.Tier]) > 0:
			delete(s.reasonSince, v.Tier)
			delete(s.reason, v.Tier)
		case s.reason[v.Tier] != v.Reason:
			s.reasonSince[v.Tier], s.reason[v.Tier] = rep.Time, v.Reason
		}
	}
	s.mu.Unlock()
	s.tab.Store(t)
	s.remakeCatalog()
	if fresh {
		select {
		case s.polled <- struct{}{}:
		default:
		}
	}
	for _, q := range s.allQueues() {
		s.dispatch(q)
	}
}

// learnLocked remembers that tier serves model; the first tier seen for a
// name keeps it (a clash is the operator's to fix: both are logged).
func (s *Server) learnLocked(model, tier string) {
	switch prev, ok := s.learned[model]; {
	case !ok:
		s.learned[model] = tier
	case prev != tier:
		s.log.Warn("two tiers list one model name; routing it to the first", "model", model, "tier", prev, "also", tier)
		s.learned[model] = prev
	}
}

func (s *Server) allQueues() []*queue {
	var out []*queue
	s.queues.Range(func(_, q any) bool {
		out = append(out, q.(*queue))
		return true
	})
	return out
}

// remakeCatalog maps each model the table's routed heads serve (their files
// and their last /v1/models) to its tier.
func (s *Server) remakeCatalog() {
	t := s.tab.Load()
	cat := map[string]string{}
	for _, tier := range slices.Sorted(maps.Keys(t.heads)) {
		for _, h := range t.heads[tier] {
			for _, m := range h.modelNames(nil) {
				if _, ok := cat[m]; !ok {
					cat[m] = tier
				}
			}
		}
	}
	s.catalog.Store(&cat)
}

// Run reads the routed heads' /v1/models every models_refresh (and at
// once when a table brings new heads), and the load of those whose slots
// are full every load_refresh, until ctx ends.
func (s *Server) Run(ctx context.Context) {
	loads := make(chan struct{})
	go func() {
		defer close(loads)
		s.runLoads(ctx)
	}()
	defer func() { <-loads }()
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.polled:
		}
		heads := s.tab.Load().allHeads()
		s.poller.pollAll(ctx, heads)
		s.mu.Lock()
		for _, h := range heads {
			for id := range h.models.Load().IDs() {
				s.learnLocked(id, h.tier)
			}
		}
		s.mu.Unlock()
		s.remakeCatalog()
		if !tick.Stop() {
			select {
			case <-tick.C:
			default:
			}
		}
		tick.Reset(s.cfg.Load().ModelsRefresh)
	}
}

// resolve names the tier and the model name to send for a client's model:
// an alias is replaced by its model; the tier is the one whose routed head
// serves it, else the one whose config lists it, else the one a file or
// head named it under. "" when no tier serves it.
func (s *Server) resolve(model string) (tier, name string) {
	cfg := s.cfg.Load()
	name = model
	if to, ok := cfg.Aliases[model]; ok {
		name = to
	}
	if tr, ok := (*s.catalog.Load())[name]; ok {
		return tr, name
	}
	for _, tr := range slices.Sorted(maps.Keys(cfg.Tiers)) {
		if slices.Contains(cfg.Tiers[tr].Models, name) {
			return tr, name
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.learned[name], name
}

// tierOf is resolve's tier for a name (no alias).
func (s *Server) tierOf(name string) string {
	tier, _ := s.resolve(name)
	return tier
}

// knownModels lists the model names clients may ask for: what routed heads
// serve, the tiers' configured models, the aliases; sorted.
func (s *Server) knownModels() []string {
	cfg := s.cfg.Load()
	var out []string
	for _, h := range s.tab.Load().allHeads() {
		out = h.modelNames(out)
	}
	for _, ft := range cfg.Tiers {
		out = append(out, ft.Models...)
	}
	out = append(out, slices.Collect(maps.Keys(cfg.Aliases))...)
	slices.Sort(out)
	return slices.Compact(out)
}

// tierModels lists the model names tier serves, as far as the front door
// knows: its routed heads', its configured models, its files', and names
// learned for it; sorted.
func (s *Server) tierModels(tier string) []string {
	t := s.tab.Load()
	var out []string
	for _, h := range t.heads[tier] {
		out = h.modelNames(out)
	}
	out = append(out, s.tierCfg(tier).Models...)
	out = append(out, t.fileModels[tier]...)
	s.mu.Lock()
	for m, tr := range s.learned {
		if tr == tier {
			out = append(out, m)
		}
	}
	s.mu.Unlock()
	slices.Sort(out)
	return slices.Compact(out)
}
