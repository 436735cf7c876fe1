package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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
	go func() { r.send(linkMsg{gen: gen, silent: silentWorkers(links, workers)}) }()
}

// handleLinks takes a silent-link check: a silent worker link of the
// running head restarts it and its workers.
func (r *Runner) handleLinks(m linkMsg) {
	r.linkChecking = false
	h := r.head
	if m.gen != h.gen || len(m.silent) == 0 || r.state == StateDraining || (h.phase != phaseStarting && h.phase != phaseReady) {
		return
	}
	r.linkSilent(m.silent)
}

// loadMsg is one reading of the head's load: requests in flight and work done.
type loadMsg struct {
	metrics health.Metrics
	err     error
}

// handlePoll runs on each poll tick: startup deadlines and probes, head
// health, or the drain's in-flight check.
func (r *Runner) handlePoll() {
	if r.state == StateDraining {
		r.checkDrain()
		return
	}
	now := r.clock.Now()
	for _, w := range r.workers {
		if w.phase == phaseStarting {
			r.pollStartingWorker(w, now)
		}
	}
	if r.head.phase == phaseStarting || r.head.phase == phaseReady {
		r.pollHead(now)
	}
}

// pollStartingWorker enforces WorkerStart and probes the worker's port.
// The probe runs only while no head exists: an rpc-server serves one client
// and a probe next to the head's connection hangs (slurm-facts 12).
func (r *Runner) pollStartingWorker(w *member, now time.Time) {
	if limit := r.plan.Timeouts.WorkerStart; now.Sub(w.startedAt) > limit {
		r.stopProcess(w, "not ready in time")
		if !w.silentSince.IsZero() {
			// Its node answered none of the last probes: unreachable, not slow.
			w.nodeFault = fmt.Sprintf("no answer at all to the worker's startup probes for %s", now.Sub(w.silentSince).Round(time.Second))
		}
		r.workerStartFailed(w, fmt.Sprintf("not ready after %s", limit))
		return
	}
	if w.checking || r.head.running() || w.spec.Port == 0 {
		return
	}
	w.checking = true
	addr := net.JoinHostPort(w.spec.Addr, strconv.Itoa(w.spec.Port))
	name, gen, timeout := w.spec.Name, w.gen, r.opts.StartupPoll*5
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		r.send(probeMsg{name: name, gen: gen, err: r.opts.Probe(ctx, addr)})
	}()
}

// pollHead enforces the load and unhealthy limits and checks /health.
func (r *Runner) pollHead(now time.Time) {
	h, t := r.head, r.plan.Timeouts
	switch {
	case h.phase == phaseStarting && now.Sub(h.startedAt) > t.Load:
		r.stopProcess(h, "not ready in time")
		r.failure(h, fmt.Sprintf("not ready after %s", t.Load))
		return
	case h.phase == phaseReady && now.Sub(h.lastOK) > t.UnhealthyAfter:
		r.stopProcess(h, "unhealthy")
		r.failure(h, fmt.Sprintf("/health failing for more than %s", t.UnhealthyAfter))
		return
	}
	if h.checking {
		return
	}
	h.checking = true
	base := health.BaseURL(h.spec.Addr, h.spec.Port)
	gen, wantModels, client := h.gen, h.phase == phaseStarting || r.models == nil, r.opts.HTTPClient
	serving := h.phase == phaseReady
	go func() {
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
		r.send(m)
	}()
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
		if r.stalled(now, *m.load) {
			return
		}
		if r.idleTooLong(now, *m.load) {
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
			r.headReady(now)
		}
	case h.phase == phaseStarting && m.status == health.StatusLoading && !h.loadingLogged:
		h.loadingLogged = true
		r.log.Info("head loading the model", "load_timeout", r.plan.Timeouts.Load)
	case h.phase == phaseReady && !h.unhealthy:
		h.unhealthy = true
		r.log.Warn("head health check failed", "status", m.status, "error", m.err)
	}
}

// stalled watches the head's progress while it serves: with requests in
// flight, its work counters must move within timeouts.stall. A head whose
// worker's link went silent blocks forever in llama.cpp's RPC (no timeout,
// no keepalive: slurm-facts 26) while /health stays 200; only the lack of
// progress shows it. Such a head is killed and restarted, its workers
// checked first. A reading that fails is no progress; an idle head is
// never stalled. It reports whether the head was found hung.
func (r *Runner) stalled(now time.Time, l loadMsg) bool {
	h := r.head
	switch {
	case r.plan.Timeouts.Stall <= 0:
		return false // off (plans built by hand; configs always set it)
	case l.err == nil && (l.metrics.InFlight == 0 || !l.metrics.HasWork):
		// Idle, or no counters to read progress from (a router): not stalled.
		h.busySince, h.work = time.Time{}, l.metrics.Work
		return false
	case l.err == nil && (l.metrics.Work != h.work || h.busySince.IsZero()):
		h.work, h.busySince = l.metrics.Work, now
		return false
	case h.busySince.IsZero(), now.Sub(h.busySince) < r.plan.Timeouts.Stall:
		// A failed reading counts only once the head was seen busy.
		return false
	}
	cause := fmt.Sprintf("hung: requests in flight and no progress for %s (a worker's link silent?)",
		now.Sub(h.busySince).Round(time.Second))
	r.log.Error("head hung", "in_flight", l.metrics.InFlight, "no_progress_for", now.Sub(h.busySince).Round(time.Second), "read_error", l.err)
	r.restartHungHead(cause)
	return true
}

// restartHungHead kills a head that waits on a worker for ever and
// restarts it with every worker. A worker cut off from the head never sees
// it go (rpc-server has no keepalive): it keeps the dead connection for
// ever, and a new head, or a port check, would queue behind it (measured,
// notes Q1). Restart every worker; one that is still cut off fails its
// port check.
func (r *Runner) restartHungHead(cause string) {
	h := r.head
	r.killProcess(h, cause)
	for _, w := range r.workers {
		r.stopProcess(w, "restarted after a hung head: a worker cut off from it holds its dead connection")
	}
	r.failure(h, cause)
}

// linkSilent takes the kernel's word that the head's connection to a
// worker went silent (data retransmitted, nothing acknowledged: its link
// or node is down): the head would wait on it for ever (slurm-facts 26),
// and a request sent now would hang until timeouts.stall. Seen in seconds,
// where the stall check needs timeouts.stall; a slow prompt batch is never
// taken for it (its data is acknowledged).
func (r *Runner) linkSilent(addrs []string) {
	cause := "the link to worker " + strings.Join(addrs, ", ") + " is silent (sent data retransmitted, nothing acknowledged)"
	r.log.Error("a worker's link is silent: restarting the head and its workers", "workers", strings.Join(addrs, ","))
	r.restartHungHead(cause)
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

// headReady marks the head ready and, with it, the tier.
func (r *Runner) headReady(now time.Time) {
	r.head.phase = phaseReady
	r.log.Info("head ready", "after", now.Sub(r.head.startedAt).Round(time.Millisecond), "models", r.models)
	r.emit(Event{Kind: EventReady, Process: r.head.spec.Name, Reason: "/health 200"})
	r.policy.Healthy(now)
	r.setState(StateReady, "head answers /health")
}

// idleTooLong ends a tier that has an idle exit (an extra replica) once
// its head, serving, has counted nothing in flight for that long: it
// drains like any ordered stop (ReasonIdle). A count that fails is not
// idle. It reports whether the stop began.
func (r *Runner) idleTooLong(now time.Time, l loadMsg) bool {
	switch {
	case r.opts.IdleExit <= 0:
		return false
	case r.state != StateReady || l.err != nil || l.metrics.InFlight > 0:
		r.idleSince = time.Time{}
		return false
	case r.idleSince.IsZero():
		r.idleSince = now
		return false
	case now.Sub(r.idleSince) < r.opts.IdleExit:
		return false
	}
	r.log.Info("idle: nothing in flight, ending this extra replica", "idle_for", now.Sub(r.idleSince).Round(time.Second),
		"idle_exit", r.opts.IdleExit)
	r.handleStop(StopRequest{Reason: ReasonIdle, Since: now})
	return true
}
