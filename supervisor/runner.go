package supervisor

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"slurm-llm/health"
	"slurm-llm/supervisor/clock"
	"slurm-llm/supervisor/tier"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ErrGaveUp is wrapped by the error Run returns when the supervisor gave up
// on the tier (failure budget spent, too few workers left). The error text
// says why.
var ErrGaveUp = errors.New("gave up")

// NodeError is the error Run returns (it wraps ErrGaveUp) when the process
// whose failure made the supervisor give up could not be used on its node
// of the job's allocation: Slurm refused to create its step there, or its
// worker could not be reached there. A fresh allocation may not have that
// fault (scripts/FACTS-cluster.md N6), a restart in this one did not help.
type NodeError struct {
	// Node is the node of the allocation; Why says what failed there.
	Node, Why string
	// Reason is the give-up's reason, as logged.
	Reason string
}

// Error reads like "gave up: worker rpc-node3 failed … (node node3: …)".
func (e *NodeError) Error() string {
	return fmt.Sprintf("%s: %s (node %s: %s)", ErrGaveUp, e.Reason, e.Node, e.Why)
}

// Unwrap makes a NodeError an ErrGaveUp.
func (e *NodeError) Unwrap() error { return ErrGaveUp }

// defaultStartupPoll is how often starting processes are checked.
const defaultStartupPoll = 100 * time.Millisecond

// Options configure a Runner. Launcher is required; every other field has
// a default when zero.
type Options struct {
	// Launcher starts the tier's processes.
	Launcher Launcher
	// Logger receives one line per state change and per process event; hclog.NewNullLogger() by default.
	Logger hclog.Logger
	// Clock is the time of every decision and timer of the runner;
	// clock.Real by default (tests pass a clock.Fake).
	Clock clock.Clock
	// Rand returns numbers in [0, 1) for the restart jitter; math/rand.Float64 by default.
	Rand func() float64
	// HTTPClient talks to the head; by default one that never uses a proxy
	// (NewHeadClient). Each request has its own timeout from the plan.
	HTTPClient *http.Client
	// Replan rebuilds the plan for a smaller set of worker nodes (Config.Plan
	// with PlanInput.Workers). Nil means a worker node is never dropped: when
	// it cannot start, the supervisor gives up.
	Replan func(workers []string) (*tier.Plan, error)
	// Observer, if set, is called on the runner's goroutine with every Event,
	// in order. It must return quickly.
	Observer func(Event)
	// PID is published in the endpoint file; os.Getpid() by default.
	PID int
	// Probe is the startup TCP probe of a worker; health.Probe by default.
	Probe func(ctx context.Context, addr string) error
	// Links lists this node's TCP connections with what they sent and had
	// acknowledged, for the silent-link check of the head's connections to
	// its workers (seen when the head runs on this node, as on the batch
	// node or an elastic leader's); health.TCPConns by default.
	Links func() ([]health.TCPConn, error)
	// StartupPoll is how often starting processes are probed and startup
	// deadlines checked; 100ms by default.
	StartupPoll time.Duration
	// RunID identifies this run in the endpoint file (16 hex digits); a
	// random one by default.
	RunID string
	// SlowStorage is how long an endpoint write may take before it is
	// logged as slow; 2s by default.
	SlowStorage time.Duration
	// Term and Serving are published in the endpoint file for an elastic
	// tier: the leader's term, and what it serves with ("2 of 3 nodes,
	// context 65536"). Zero for other tiers.
	Term    int
	Serving string
	// IdleExit, when positive, ends the tier after it has served this long
	// with no request in flight: an ordered stop (ReasonIdle) whose drain
	// first waits IdleUnroute for the controller to stop routing to it.
	// The keeper sets it on extra replicas (SLURM_LLM_IDLE_EXIT).
	IdleExit time.Duration
	// IdleUnroute is how long an idle stop waits, draining, before it may
	// end (the controller's reload after the endpoint went draining);
	// 0 means DefaultIdleUnroute.
	IdleUnroute time.Duration
}

// DefaultIdleUnroute: llm-upstreams watch reloads nginx within about a
// second of an endpoint going draining; a request nginx sent before that
// is counted in flight by then.
const DefaultIdleUnroute = 3 * time.Second

// StopReason says why the tier is asked to stop; it is published as the
// endpoint's reason while draining.
type StopReason string

// The reasons for an ordered stop.
const (
	ReasonShutdown  StopReason = "shutdown"
	ReasonCancelled StopReason = "cancelled"
	ReasonPreempted StopReason = "preempted"
	ReasonTimeLimit StopReason = "time limit"
	// ReasonSuperseded: a newer run of the same job owns the endpoint file;
	// this run is stale (its node was cut off, Slurm moved on).
	ReasonSuperseded StopReason = "superseded by a newer run"
	// ReasonIdle: an extra replica served nothing for Options.IdleExit.
	ReasonIdle StopReason = "idle"
)

// StopRequest asks a running tier for an ordered stop. SkipDrain skips the
// wait for in-flight requests (a second signal: stop now). Since is when
// the stop was noticed, or Slurm's PreemptTime once known: the drain
// budget counts from the earliest Since of the requests (zero: when the
// runner takes the first request).
type StopRequest struct {
	Reason    StopReason
	SkipDrain bool
	Since     time.Time
}

// Runner brings one tier up, keeps it up, publishes its endpoint file and
// stops it in order. One goroutine (Run's) owns all of its lifecycle state;
// everything else reaches it through channels.
type Runner struct {
	plan   *tier.Plan
	opts   Options
	clock  clock.Clock
	log    hclog.Logger
	policy *RestartPolicy
	pub    *publisher

	stopCh chan StopRequest
	msgs   chan any
	quit   chan struct{}
	// asking counts the questions the Run goroutine sent off (ask) whose
	// answer is not in msgs yet: with msgs empty and none asking, nothing
	// is on its way to the Run goroutine but processes' exits and stops.
	asking atomic.Int64
	// leases holds the latest lease renewal for the head (Lease).
	leases chan time.Time

	// Owned by the Run goroutine.
	state     State
	reason    string
	startedAt time.Time
	head      *member
	workers   []*member
	retired   []*member
	restartAt time.Time
	models    []string
	// leaseUntil is when the head's lease ends (its Process.LeaseUntil,
	// then each renewal); zero: the head has no lease. leaseEndedLogged:
	// that a head was not started for it was logged.
	leaseUntil       time.Time
	leaseEndedLogged bool
	// inFlight is the head's last count of requests in flight; nil when unknown.
	inFlight *int
	// idleSince is when the head, serving, was first counted with nothing
	// in flight since (zero: busy, unknown, or not serving).
	idleSince time.Time
	drain     drainState
	err       error
	poll      clock.Ticker
	pollEvery time.Duration
	// links ticks the silent-link checks (linkCheckEvery); linkChecking:
	// one is under way.
	links        clock.Ticker
	linkChecking bool
	wake         clock.Timer
	heartbeat    clock.Ticker
}

// New returns a Runner for plan. It checks that plan can be run.
func New(plan *tier.Plan, opts Options) (*Runner, error) {
	if err := checkRunnable(plan, opts); err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, fmt.Errorf("new runner: %w", err)
	}
	r := &Runner{
		plan: plan, opts: opts, clock: opts.Clock, log: opts.Logger,
		policy: NewRestartPolicy(plan.Restart, opts.Rand),
		stopCh: make(chan StopRequest, 4), msgs: make(chan any, 16), quit: make(chan struct{}),
		leases: make(chan time.Time, 1),
		state:  StateStarting, reason: "starting", leaseUntil: plan.Head.LeaseUntil,
	}
	r.pub = newPublisher(plan.EndpointDir, opts.RunID, plan.HintAddr, opts.SlowStorage, opts.Logger, func() { r.send(supersededMsg{}) })
	r.applyPlan(plan)
	return r, nil
}

// checkRunnable rejects what would make Run panic or spin.
func checkRunnable(plan *tier.Plan, opts Options) error {
	switch {
	case plan == nil:
		return errors.New("no plan")
	case opts.Launcher == nil:
		return errors.New("no launcher")
	case plan.Head.Name == "" || len(plan.Head.Argv) == 0:
		return errors.New("plan has no head process")
	}
	t := plan.Timeouts
	for _, d := range []time.Duration{t.WorkerStart, t.Load, t.HealthInterval, t.HealthTimeout,
		t.UnhealthyAfter, t.StopGrace, t.Heartbeat, t.Lease, plan.Drain.InFlightPoll} {
		if d <= 0 {
			return fmt.Errorf("plan has a timeout that is not positive: %+v, drain poll %s", t, plan.Drain.InFlightPoll)
		}
	}
	return nil
}

// withDefaults fills in the zero fields of opts.
func withDefaults(o Options) (Options, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.HTTPClient == nil {
		o.HTTPClient = NewHeadClient()
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.StartupPoll <= 0 {
		o.StartupPoll = defaultStartupPoll
	}
	if o.Probe == nil {
		o.Probe = health.Probe
	}
	if o.Links == nil {
		o.Links = health.TCPConns
	}
	if o.SlowStorage <= 0 {
		o.SlowStorage = defaultSlowStorage
	}
	if o.RunID == "" {
		id, err := NewRunID()
		if err != nil {
			return o, err
		}
		o.RunID = id
	}
	return o, nil
}

// defaultSlowStorage is Options.SlowStorage's default.
const defaultSlowStorage = 2 * time.Second

// NewRunID returns a random run id: 16 hex digits.
func NewRunID() (string, error) {
	b := make([]byte, 8)
	if _, err := cryptorand.Read(b); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// NewHeadClient returns the HTTP client the runner talks to heads with. It
// never uses a proxy: sbatch exports the submitter's environment into the
// job, http_proxy included, and a head on a compute node is reached
// directly or not at all.
func NewHeadClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return &http.Client{Transport: t}
}

// Stop asks the tier for an ordered stop. It never blocks and is safe to
// call from any goroutine, before or during Run; a second request with
// SkipDrain cuts a running drain short.
func (r *Runner) Stop(req StopRequest) {
	select {
	case r.stopCh <- req:
	default:
		r.log.Warn("stop request dropped: too many pending", "reason", req.Reason)
	}
}

// Run brings the tier up and supervises it until an ordered stop ends
// (nil) or the supervisor gives up (an error wrapping ErrGaveUp). Every
// process it started is gone when it returns, and the endpoint file is
// removed. Cancelling ctx is a stop that skips the drain.
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.quit)
	r.startedAt = r.clock.Now()
	r.poll = r.clock.NewTicker(r.opts.StartupPoll)
	r.pollEvery = r.opts.StartupPoll
	r.heartbeat = r.clock.NewTicker(r.plan.Timeouts.Heartbeat)
	r.links = r.clock.NewTicker(linkCheckEvery)
	defer r.links.Stop()
	r.wake = r.clock.NewTimer(time.Hour)
	r.wake.Stop()
	defer r.poll.Stop()
	defer r.heartbeat.Stop()
	r.log.Info("tier state", "to", r.state, "reason", r.reason, "workers", len(r.workers))
	r.emit(Event{Kind: EventState, State: r.state, Reason: r.reason})
	r.writeEndpoint()
	r.reconcile()
	done := ctx.Done()
	for !r.state.Terminal() {
		select {
		case <-done:
			done = nil
			r.handleStop(StopRequest{Reason: ReasonShutdown, SkipDrain: true})
		case req := <-r.stopCh:
			r.handleStop(req)
		case m := <-r.msgs:
			r.handleMsg(m)
		case <-r.poll.C():
			r.handlePoll()
		case <-r.heartbeat.C():
			r.writeEndpoint()
		case <-r.wake.C():
			r.reconcile()
		case d := <-r.leases:
			r.renewLease(d)
		case <-r.links.C():
			r.checkLinks()
		}
		r.updatePoll()
	}
	return r.err
}

// Lease renews the head's lease (its Process.LeaseUntil) until the time
// until. It never blocks and is safe to call from any goroutine: only the
// latest renewal is kept until the Run goroutine takes it. An elastic
// leader renews its head's lease to the end of its lead at every renewal
// of its member lease, so that the head's shim kills the head when the
// lead ends unrenewed (the leader frozen, its shared file system hung),
// whatever the supervisor is doing. The time is absolute: a renewal that
// waits on its way cannot lengthen the lease.
func (r *Runner) Lease(until time.Time) {
	for {
		select {
		case r.leases <- until:
			return
		default:
		}
		select {
		case <-r.leases: // an older renewal not taken yet: the new one replaces it
		default:
		}
	}
}

// renewLease keeps the lease's new end for the head's next start and
// passes it to the running head's shim; a head that was not started for
// want of a lease may start now.
func (r *Runner) renewLease(until time.Time) {
	r.leaseUntil, r.leaseEndedLogged = until, false
	if !r.head.running() {
		r.reconcile()
		return
	}
	if l, ok := r.head.h.(Leaser); ok {
		l.Lease(until)
	}
}

// leaseEnded reports whether the head has a lease and it has ended: its
// shim would kill it at once, so it is not started (logged once per
// renewal).
func (r *Runner) leaseEnded() bool {
	if r.leaseUntil.IsZero() || r.clock.Now().Before(r.leaseUntil) {
		return false
	}
	if !r.leaseEndedLogged {
		r.leaseEndedLogged = true
		r.log.Warn("the head's lease has ended: not starting it unless the lease is renewed",
			"lease_until", r.leaseUntil.UTC().Format(time.RFC3339Nano))
	}
	return true
}

// ask runs question on a goroutine and delivers its answer to the Run
// goroutine as a message (a check of the head, a worker's port, the
// links, the requests in flight): nothing that waits on a network is done
// on the Run goroutine.
func (r *Runner) ask(question func() any) {
	r.asking.Add(1)
	go func() {
		defer r.asking.Add(-1)
		r.send(question())
	}()
}

// send delivers a message from a helper goroutine to the Run goroutine,
// unless Run has returned.
func (r *Runner) send(m any) {
	select {
	case r.msgs <- m:
	case <-r.quit:
	}
}

// handleMsg dispatches a message from a helper goroutine.
func (r *Runner) handleMsg(m any) {
	switch m := m.(type) {
	case exitMsg:
		r.handleExit(m)
	case readyMsg:
		r.handleReady(m)
	case probeMsg:
		r.handleProbe(m)
	case healthMsg:
		r.handleHealth(m)
	case inFlightMsg:
		r.handleInFlight(m)
	case savedMsg:
		r.handleSaved(m)
	case supersededMsg:
		r.handleSuperseded()
	case unreachableMsg:
		r.handleUnreachable(m)
	case linkMsg:
		r.handleLinks(m)
	}
}

// setState moves the tier to a new state with one log line, an Event and
// an endpoint refresh. A transition CanTransition forbids is a bug: it is
// logged and ignored.
func (r *Runner) setState(to State, reason string) {
	if !CanTransition(r.state, to) {
		r.log.Error("bug: state transition not allowed", "from", r.state, "to", to, "reason", reason)
		return
	}
	from := r.state
	r.state, r.reason = to, reason
	switch to {
	case StateFailed:
		r.log.Error("gave up", "from", from, "reason", reason)
	case StateRecovering:
		r.log.Warn("tier state", "from", from, "to", to, "reason", reason)
	default:
		r.log.Info("tier state", "from", from, "to", to, "reason", reason)
	}
	r.emit(Event{Kind: EventState, State: to, Reason: reason})
	r.writeEndpoint()
}
