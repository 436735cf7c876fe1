package supervisor

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"slurm-llm/health"
)

// healthMsg is the result of one /health check of the head (and, once per
// start, of its /v1/models; while it serves, of its requests in flight).
type healthMsg struct {
	gen    int
	status health.Status
	err    error
	models []string
	// load is set when the head's load was read (while it serves).
	load *loadMsg
}

// linkMsg is one silent-link check of the head's connections to its
// workers: silent names the workers (host:port) whose connection the
// kernel shows silent (health.SilentPeers).
type linkMsg struct {
	gen    int
	silent []string
}

// linkCheckEvery is how often the head's connections to its workers are
// read from the kernel (one sock_diag dump per address family, about
// BenchmarkTCPConns's figure): on a clock of its own, not the health
// check's, whose HTTP calls to a head stuck on a silent worker wait out
// health_timeout.
const linkCheckEvery = 500 * time.Millisecond

// checkLinks starts a silent-link check of the running head's connections
// to its workers, unless one is under way.
func (r *Runner) checkLinks() {
	h := r.head
	if r.linkChecking || r.state == StateDraining || (h.phase != phaseStarting && h.phase != phaseReady) {
		return
	}
	workers := r.workerAddrs()
	if len(workers) == 0 {
		return
	}
	r.linkChecking = true
	gen, links := h.gen, r.opts.Links
	r.ask(func() any { return linkMsg{gen: gen, silent: silentWorkers(links, workers)} })
}

// handleLinks takes a silent-link check of the running head (life.go,
// onSilentLink).
func (r *Runner) handleLinks(m linkMsg) {
	r.linkChecking = false
	if m.gen != r.head.gen {
		return
	}
	r.apply(onSilentLink(r.view(), m.silent, r.deps()))
}

// loadMsg is one reading of the head's load: requests in flight and work done.
type loadMsg struct {
	metrics health.Metrics
	err     error
}

// handlePoll runs on each poll tick: startup deadlines and probes, head
// health, or the drain's in-flight check (life.go: onWorkerDeadline,
// onHeadDeadline, onDrainPoll).
func (r *Runner) handlePoll() {
	if r.state == StateDraining {
		r.checkDrain()
		return
	}
	for _, w := range r.workers {
		if w.phase != phaseStarting {
			continue
		}
		if steps := onWorkerDeadline(r.view(), w.spec.Name, r.deps()); steps != nil {
			r.apply(steps)
			continue
		}
		r.probeWorker(w)
	}
	if r.head.phase == phaseStarting || r.head.phase == phaseReady {
		if steps := onHeadDeadline(r.view(), r.deps()); steps != nil {
			r.apply(steps)
			return
		}
		r.checkHead()
	}
}

// probeWorker probes a starting worker's port. The probe runs only while
// no head exists: an rpc-server serves one client and a probe next to the
// head's connection hangs (slurm-facts 12).
func (r *Runner) probeWorker(w *member) {
	if w.checking || r.head.running() || w.spec.Port == 0 {
		return
	}
	w.checking = true
	addr := net.JoinHostPort(w.spec.Addr, strconv.Itoa(w.spec.Port))
	name, gen, timeout := w.spec.Name, w.gen, r.opts.StartupPoll*5
	r.ask(func() any {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return probeMsg{name: name, gen: gen, err: r.opts.Probe(ctx, addr)}
	})
}

// checkHead checks the head's /health (and, once per start, its models;
// while it serves, its load) on a goroutine; the answer is a healthMsg.
func (r *Runner) checkHead() {
	h, t := r.head, r.plan.Timeouts
	if h.checking {
		return
	}
	h.checking = true
	base := health.BaseURL(h.spec.Addr, h.spec.Port)
	gen, wantModels, client := h.gen, h.phase == phaseStarting || r.models == nil, r.opts.HTTPClient
	serving := h.phase == phaseReady
	r.ask(func() any {
		ctx, cancel := context.WithTimeout(context.Background(), t.HealthTimeout)
		defer cancel()
		m := healthMsg{gen: gen}
		m.status, m.err = health.Check(ctx, client, base)
		if m.status == health.StatusReady && wantModels {
			m.models, _ = health.Models(ctx, client, base)
		}
		if m.status == health.StatusReady && serving {
			lm, err := health.Load(ctx, client, base)
			m.load = &loadMsg{metrics: lm, err: err}
		}
		return m
	})
}

// handleHealth takes a /health result: a starting head becomes ready on
// 200; a ready head's last good answer is remembered.
func (r *Runner) handleHealth(m healthMsg) {
	h := r.head
	if m.gen != h.gen || (h.phase != phaseStarting && h.phase != phaseReady) {
		return
	}
	h.checking = false
	now := r.clock.Now()
	if m.load != nil {
		r.recordInFlight(inFlightMsg{gen: m.gen, n: m.load.metrics.InFlight, err: m.load.err})
		steps := onLoad(r.view(), *m.load, r.deps())
		r.apply(steps)
		if ends(steps) {
			return
		}
	}
	if m.models != nil && !slices.Equal(m.models, r.models) {
		r.models = m.models
		r.writeEndpoint()
	}
	switch {
	case m.status == health.StatusReady:
		h.lastOK = now
		if h.unhealthy {
			h.unhealthy = false
			r.log.Info("head healthy again")
		}
		if h.phase == phaseStarting && r.headHoldsPort() {
			r.apply(onHeadReady(r.view()))
		}
	case h.phase == phaseStarting && m.status == health.StatusLoading && !h.loadingLogged:
		h.loadingLogged = true
		r.log.Info("head loading the model", "load_timeout", r.plan.Timeouts.Load)
	case h.phase == phaseReady && !h.unhealthy:
		h.unhealthy = true
		r.log.Warn("head health check failed", "status", m.status, "error", m.err)
	}
}

// ends reports whether a load reading's steps end the head's service (it
// hung, or an idle extra stops): only the tracking of its progress and
// idleness leaves it serving.
func ends(steps []lifeStep) bool {
	for _, s := range steps {
		if s.Kind != stepProgress && s.Kind != stepIdleSince {
			return true
		}
	}
	return false
}

// workerAddrs are the workers' host:port, for the silent-link check.
func (r *Runner) workerAddrs() []string {
	var out []string
	for _, w := range r.workers {
		if w.spec.Port > 0 {
			out = append(out, net.JoinHostPort(w.spec.Addr, strconv.Itoa(w.spec.Port)))
		}
	}
	return out
}

// silentWorkers asks the kernel (links) which of the workers' connections
// are silent; any error gives none (a check that cannot run never stops a
// head). The workers' addresses are the plan's, IP literals (resolved on
// the batch node when the plan was made: tier.ResolveAddresses).
func silentWorkers(links func() ([]health.TCPConn, error), workers []string) []string {
	if links == nil || len(workers) == 0 {
		return nil
	}
	conns, err := links()
	if err != nil {
		return nil
	}
	byAddr := map[netip.AddrPort]string{}
	var dsts []netip.AddrPort
	for _, w := range workers {
		d, err := netip.ParseAddrPort(w)
		if err != nil {
			continue
		}
		d = netip.AddrPortFrom(d.Addr().Unmap(), d.Port())
		byAddr[d] = w
		dsts = append(dsts, d)
	}
	var out []string
	for _, d := range health.SilentPeers(conns, dsts) {
		out = append(out, byAddr[d])
	}
	return out
}

// headHoldsPort reports whether the head process itself holds its port,
// so that the /health answer just seen is its own and not a stale
// server's or another tier's on the same port. Until then the head stays
// starting (its load timeout still applies); the first such answer is
// logged.
func (r *Runner) headHoldsPort() bool {
	h := r.head
	if h.h == nil {
		return false
	}
	select {
	case <-h.h.Listening():
		return true
	default:
	}
	if !h.foreignLogged {
		h.foreignLogged = true
		r.log.Warn("port answers /health, but the head does not hold it (yet): another server there?",
			"port", h.spec.Port, "node", h.spec.Node)
	}
	return false
}

// headReady marks the head ready at now (the tier's state follows, a
// step of onHeadReady).
func (r *Runner) headReady(now time.Time) {
	r.head.phase = phaseReady
	r.log.Info("head ready", "after", now.Sub(r.head.startedAt).Round(time.Millisecond), "models", r.models)
	r.emit(Event{Kind: EventReady, Process: r.head.spec.Name, Reason: "/health 200"})
	r.policy.Healthy(now)
	r.publishHead()
}
