package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/promtest"
	"slurm-llm/endpoints/tiers"
)

var updateProcess = flag.Bool("update-metrics", false, "rewrite testdata/process-families.golden")

// checkProcessGolden compares got with the file at path, or rewrites it
// under -update-metrics.
func checkProcessGolden(t *testing.T, path, got string) {
	t.Helper()
	if *updateProcess {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

func TestServeMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m := &tiers.Metrics{}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	m.Record(tiers.Report{Time: t0, Tiers: []tiers.TierReport{{Tier: "fast", Servers: []string{"a", "b"}}}}, nil)
	m.Record(tiers.Report{}, fmt.Errorf("apply: %w", tiers.ErrNotSwitched))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, addr, m.Gatherer(), "v1.2.3") }()
	t.Cleanup(func() { cancel(); <-done })
	var body string
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never served: %v", err)
		}
		<-tick.C
	}
	got, err := promtest.Samples(body)
	if err != nil {
		t.Fatalf("not Prometheus text: %v\n%s", err, body)
	}
	for _, want := range []string{
		"llm_upstreams_passes_total 2", "llm_upstreams_reload_failures_total 1", "llm_upstreams_pass_errors_total 1",
		`llm_upstreams_endpoints{tier="fast"} 2`, "llm_upstreams_last_good_apply_timestamp_seconds 1795262400",
		`llm_upstreams_build_info{version="v1.2.3",goversion="` + runtime.Version() + `"} 1`,
	} {
		key, v, err := promtest.Line(want)
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	// The process's own figures (issue 29): goroutines, memory, descriptors.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_open_fds", "process_max_fds", "process_resident_memory_bytes"} {
		if _, ok := got[name]; !ok {
			t.Errorf("metrics lack %s", name)
		}
	}
}

// What every metrics listener serves beside its own figures (build
// information, the Go and process collectors) is pinned too: dashboards
// and alerts read them (-update-metrics rewrites the golden file).
func TestProcessFamiliesGolden(t *testing.T) {
	got, err := promtest.Families(ProcessGatherer("test"))
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for i, line := range got {
		if !strings.HasPrefix(line, "llm_") {
			// client_golang's own help texts (some are the Go runtime's
			// descriptions, which change with Go) are not pinned.
			got[i] = strings.Join(strings.Fields(line)[:3], " ")
			continue
		}
		ours = append(ours, line)
	}
	checkProcessGolden(t, filepath.Join("testdata", "process-families.golden"), strings.Join(got, "\n")+"\n")
	// client_golang's go_memstats_alloc_bytes (gauge) and
	// go_memstats_alloc_bytes_total (counter) clash, as they do for every
	// Go program; ours must not.
	mine, err := promtest.Families((&tiers.Metrics{}).Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	if c := promtest.Clashes(append(mine, ours...)); len(c) != 0 {
		t.Errorf("families that OpenMetrics takes for one: %v", c)
	}
}

// TestServeMetricsCutsSlowAndIdleClients: the metrics listener (watch,
// keep and the front door's) cuts a client that sends its header slowly
// and one that keeps a connection idle after a scrape (issue 23: it had
// only the header timeout, so an idle connection was kept for ever).
func TestServeMetricsCutsSlowAndIdleClients(t *testing.T) {
	old := metricsTimeouts
	defer func() { metricsTimeouts = old }()
	metricsTimeouts.readHeader, metricsTimeouts.read, metricsTimeouts.write, metricsTimeouts.idle =
		200*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, addr, (&tiers.Metrics{}).Gatherer(), "test") }()
	defer func() { cancel(); <-done }()

	dial := func() net.Conn {
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics listener never came up: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// closedWithin reads until the server closes the connection, or fails.
	closedWithin := func(c net.Conn, what string) {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("%s: the connection was still open after 5 s", what)
				}
				return
			}
		}
	}
	slow := dial()
	defer slow.Close()
	io.WriteString(slow, "GET /metrics HTTP/1.1\r\n") // and never the rest
	closedWithin(slow, "a header sent slowly")

	idle := dial()
	defer idle.Close()
	io.WriteString(idle, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	closedWithin(idle, "an idle keep-alive connection after a scrape")
}
