package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/internal/journal"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/front"
	"slurm-llm/endpoints/front/rawconn"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/endpoints/tiers/continuity"
)

// frontShutdownGrace is how long a stopping front door lets the answers
// under way finish before it closes their connections.
const frontShutdownGrace = 30 * time.Second

// frontMemoryHeadroom is what the front door may hold besides request
// bodies before its soft memory limit makes the collector work harder:
// about 100 MB of resident memory with 1,000 streams (README Benchmarks).
const frontMemoryHeadroom = 128 << 20

// frontMemoryLimit is the Go runtime's soft memory limit for a front door
// that holds at most bodies bytes of request bodies (the environment's
// GOMEMLIMIT wins, "off" included). Without one, Go's collector lets the
// garbage of answered bodies grow to about the live heap's size before it
// collects: bursts of large bodies one after another took the process to
// about twice max_body_bytes_in_flight (BenchmarkE2EFrontBodyMemory).
func frontMemoryLimit(bodies int64) int64 {
	if bodies <= 0 || bodies > math.MaxInt64-frontMemoryHeadroom {
		return math.MaxInt64
	}
	return bodies + frontMemoryHeadroom
}

// runFront runs the front door until SIGTERM or SIGINT; SIGHUP re-reads
// the config (listeners need a restart). It serves nothing before the
// first pass has routed: clients wait in the listen backlog meanwhile
// instead of getting a 404 for a model not seen yet.
func runFront(cfg config.Config, path string, log hclog.Logger) int {
	if cfg.Front.Listen == "" {
		log.Error("config: [front] listen is not set; the front door has nowhere to listen", "config", path)
		return exitUsage
	}
	if procs := cfg.Front.MaxProcs; procs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(frontMemoryLimit(cfg.Front.MaxBodyBytesInFlight))
	}
	accessOut, closeAccess, err := openAccessLog(cfg.Front.AccessLog)
	if err != nil {
		log.Error("access log", "error", err)
		return exitUsage
	}
	defer closeAccess()
	users, err := access.New(cfg.Front.Access, access.Options{Log: log.Named("access")})
	if err != nil {
		log.Error("config: who uses the front door ([front.auth], [front.usage])", "error", err)
		return exitUsage
	}
	defer users.Close() // after the last request's record
	if users.Weights != nil {
		// Slurm's fair-share factors before the first request: a tier busy
		// from the start is ordered by them, not by equal weights until a
		// background read ends. A failure is logged; equal weights then, and
		// sshare is asked again at the first busy moment after sshare_ttl.
		_ = users.Weights.Refresh(context.Background())
	}
	ln, err := net.Listen("tcp", cfg.Front.Listen)
	if err != nil {
		log.Error("front door", "error", err)
		return exitFailed
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	hup := make(chan struct{}, 1)
	go forwardSignals(ctx, sigs, cancel, hup, log)

	fd := front.New(cfg.Front, front.Options{Log: log.Named("front"), AccessLog: accessOut, Access: users})
	first := make(chan struct{})
	firstPass := tiers.ConsumerFunc(func(context.Context, *tiers.Report) error {
		select {
		case <-first:
		default:
			close(first)
		}
		return nil
	})
	u := newFrontUpdater(cfg.Watcher, log, fd, firstPass)
	warnContinuation(u.ContinueFacts(cfg.Front.Hold, cfg.Front.HoldUnknown), log)
	hints, err := listenFrontHints(cfg.Front.HintListen, log)
	if err != nil {
		return exitFailed
	}
	if hints != nil {
		defer hints.Close()
	}
	errs := make(chan error, 3)
	go fd.Run(ctx)
	go func() {
		notify, every := systemdNotifier(log)
		errs <- u.Watch(ctx, tiers.WatchOptions{Reload: hup, Hints: hints, Notify: notify, WatchdogInterval: every,
			LoadConfig: func() (tiers.Config, error) {
				c, err := config.Load(path)
				if err == nil {
					if rerr := users.Reload(c.Front.Access); rerr != nil {
						log.Error("reload: the static keys file; the last good keys stay", "error", rerr)
					}
					fd.SetConfig(c.Front)
					warnContinuation(tiers.New(c.Watcher, tiers.Options{}).ContinueFacts(c.Front.Hold, c.Front.HoldUnknown), log)
				}
				return c.Watcher, err
			}})
	}()
	srv := frontServer(cfg.Front, fd)
	go func() {
		select {
		case <-first:
		case <-ctx.Done():
		}
		log.Info("front door serving", "addr", ln.Addr().String())
		if err := srv.Serve(rawconn.Listener(ln)); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("front door: %w", err)
		}
	}()
	if cfg.Front.MetricsListen != "" {
		status := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(fd.StatusJSON())
		})
		routes := []Route{{Path: "/status", Handler: status}}
		if users.OperatorKeys != nil {
			// The key endpoint on the operator listener too: root revokes a
			// leaked key here whatever happens on the client port.
			routes = append(routes, Route{Path: access.KeysPath, Handler: users.OperatorKeys})
		}
		go func() {
			errs <- ServeMetrics(ctx, cfg.Front.MetricsListen, fd.Metrics().Gatherer(), version, routes...)
		}()
	}
	err = <-errs
	cancel()
	sctx, stop := context.WithTimeout(context.Background(), frontShutdownGrace)
	defer stop()
	fd.StopFeeds() // the held /models/sse feeds end now, not at the grace
	_ = srv.Shutdown(sctx)
	fd.Close() // the access lines still queued
	if err != nil {
		log.Error("front door", "error", err)
		return exitFailed
	}
	log.Info("stopped")
	return exitOK
}

// newFrontUpdater is newUpdater for the front door: the same checks, its
// passes read-only, routed in memory by the consumers (the front door's
// table first).
func newFrontUpdater(cfg tiers.Config, log hclog.Logger, consumers ...tiers.Consumer) *tiers.Updater {
	warnUnsafeDir(cfg, log)
	opts := updaterOptions(cfg, log)
	opts.Consumers, opts.ReadOnly = consumers, true
	return tiers.New(cfg, opts)
}

// warnContinuation logs, per tier, each reason a stream cut by its
// drain's deadline would not be continued with these settings, as far as
// the front door knows them: its holds, the keeper's release, the
// measured start-to-ready. The drains are set in the tiers' configs, on
// the job side: llm-supervisor check-config checks them against this
// file.
func warnContinuation(facts []continuity.Facts, log hclog.Logger) {
	for _, f := range facts {
		for _, why := range continuity.Check(f) {
			log.Warn("a stream cut by a drain would not be continued", "tier", f.Tier, "why", why)
		}
	}
}

// listenFrontHints opens the front door's own hint listener, if set.
func listenFrontHints(addr string, log hclog.Logger) (*endpoints.Hints, error) {
	if addr == "" {
		return nil, nil
	}
	h, err := endpoints.ListenHints(addr)
	if err != nil {
		log.Error("hints", "error", err)
		return nil, err
	}
	log.Info("listening for hints", "addr", h.Addr().String())
	return h, nil
}

// frontServer is the client-facing HTTP server: bounded headers, header
// and idle timeouts (the body's and each write's are the handler's: a
// stream as a whole has no deadline).
func frontServer(cfg front.Config, h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: cfg.IdleTimeout,
		MaxHeaderBytes: int(cfg.MaxHeaderBytes)}
}

// openAccessLog opens where access lines go: "-" standard error (under
// systemd each line at the journal's info priority), "" none, else a file
// opened for appending.
func openAccessLog(where string) (io.Writer, func(), error) {
	switch where {
	case "":
		return nil, func() {}, nil
	case "-":
		return journal.Wrap(os.Stderr), func() {}, nil
	}
	f, err := os.OpenFile(where, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("open access log: %w", err)
	}
	return f, func() { f.Close() }, nil
}
