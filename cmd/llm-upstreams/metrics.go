package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The metrics listeners of llm-upstreams watch, keep and front: one
// program, so one build-information family and the same timeouts.

// Route is one more handler an operator's metrics listener serves.
type Route struct {
	Path    string
	Handler http.Handler
}

// metricsTimeouts are the metrics listener's timeouts (tests shorten them).
var metricsTimeouts = struct{ readHeader, read, write, idle time.Duration }{
	readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: time.Minute}

// BuildInfoName is the build information family every metrics listener
// of llm-upstreams (watch, keep, front) serves: one program, one name;
// Prometheus' job label tells the listeners apart.
const BuildInfoName = "llm_upstreams_build_info"

// ProcessGatherer gathers what every metrics listener serves beside its
// own figures: BuildInfoName{version,goversion} (always 1) and
// client_golang's Go runtime (go_*: memory, goroutines, GC) and process
// (process_*: CPU, resident memory, file descriptors against their limit)
// collectors, for daemons that run for months. The node_exporter textfile
// leaves them out: they would describe a process that has ended.
func ProcessGatherer(version string) prometheus.Gatherer {
	r := prometheus.NewRegistry()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: BuildInfoName,
		Help: "Always 1: the version of llm-upstreams and of the Go that built it, as labels."}, []string{"version", "goversion"})
	info.WithLabelValues(version, runtime.Version()).Set(1)
	r.MustRegister(info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// ServeMetrics serves GET /metrics (what g gathers, and ProcessGatherer's
// figures for version) and routes on addr until ctx ends. Every listener
// has its timeouts: a client that sends slowly or keeps a connection idle
// is cut.
func ServeMetrics(ctx context.Context, addr string, g prometheus.Gatherer, version string, routes ...Route) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{g, ProcessGatherer(version)}, promhttp.HandlerOpts{}))
	for _, r := range routes {
		mux.Handle(r.Path, r.Handler)
	}
	t := metricsTimeouts
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: t.readHeader, ReadTimeout: t.read,
		WriteTimeout: t.write, IdleTimeout: t.idle}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics serve: %w", err)
	}
	return nil
}
