//go:build e2e

package front_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/front"
)

// BenchmarkE2EFrontBodyMemory is issue 27's memory figure: 64 clients at
// once, each posting a 30 MiB chat body (a long document in the prompt)
// to the real `llm-upstreams front` process, whose head answers each in
// about 2 s; every body is kept until its answer ends. It runs the front
// door twice on the same head: with the shipped bound on request bytes in
// flight (max_body_bytes_in_flight, 256 MiB: at most 8 such bodies), and
// with the bound out of reach (4 GiB: what the process held before the
// bound existed). Each reports the front door's peak resident set (VmHWM)
// against its bound, how many clients were answered and how many got the
// 503 busy. The clients send Expect: 100-continue, as curl does for a
// body over 1 MiB, so a refused one never sends its body. Rounds come one
// after the other (-benchtime 5x: five bursts): the bodies of a round are
// garbage once answered, and Go's collector lets the heap grow to about
// twice what was live before it collects, so the peak over several
// bursts shows what the bound gives with the runtime's defaults
// (BENCH_FRONT_ENV=GOMEMLIMIT=... runs the front door under a soft
// memory limit instead).
func BenchmarkE2EFrontBodyMemory(b *testing.B) {
	const clients, size = 64, 30 << 20
	w := newBenchWorld(b)
	w.head(b, 301, "tiny", "--parallel", "64", "--fake-tokens", "40", "--fake-token-rate", "20")
	body := bigChat(size)
	for _, run := range []struct{ name, bound string }{{"shipped bound", ""}, {"no bound", `max_body_bytes_in_flight = "4GiB"`}} {
		port := faketest.FreePort(b)
		cfg := boundConfig(b, w.config(b, port, nil), run.name, run.bound)
		limit := loadFront(b, cfg).MaxBodyBytesInFlight
		url, proc := w.front(b, cfg, port)
		before := peakRSS(b, proc.Process.Pid)
		var ok, busy, other int
		for i := 0; i < b.N; i++ {
			o, bz, ot := postAll(b, url, body, clients)
			ok, busy, other = ok+o, busy+bz, other+ot
		}
		rss := peakRSS(b, proc.Process.Pid)
		b.Logf("%s (max_body_bytes_in_flight %d MiB): %d clients × %d MiB, %d rounds: %d answered, %d got 503 busy, %d other; front door peak RSS %.1f MB (%.1f MB before the load)",
			run.name, limit>>20, clients, size>>20, b.N, ok, busy, other, rss, before)
		if other > 0 {
			b.Errorf("%s: %d clients got neither an answer nor the 503 busy", run.name, other)
		}
		tag := strings.ReplaceAll(run.name, " ", "-")
		b.ReportMetric(rss, "peak-RSS-MB("+tag+")")
		b.ReportMetric(float64(limit>>20), "bound-MiB("+tag+")")
		b.ReportMetric(float64(busy)/float64(b.N), "busy/round("+tag+")")
		b.ReportMetric(float64(ok)/float64(b.N), "answered/round("+tag+")")
		_ = proc.Process.Kill()
		_ = proc.Wait()
	}
}

// bigChat is a chat request whose one message makes the body size bytes.
func bigChat(size int) []byte {
	head := []byte(`{"model":"tiny","max_tokens":40,"messages":[{"role":"user","content":"`)
	tail := []byte(`"}]}`)
	return append(append(head, bytes.Repeat([]byte("x"), size-len(head)-len(tail))...), tail...)
}

// boundConfig writes a copy of the config cfg with line added to [front]
// (none: cfg as it is) and returns its path.
func boundConfig(b *testing.B, cfg, name, line string) string {
	b.Helper()
	if line == "" {
		return cfg
	}
	raw, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	path := strings.TrimSuffix(cfg, ".toml") + "-" + strings.ReplaceAll(name, " ", "-") + ".toml"
	out := strings.Replace(string(raw), "[front]\n", "[front]\n"+line+"\n", 1)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// loadFront is the [front] of the config at path, as the front door reads it.
func loadFront(b *testing.B, path string) front.Config {
	b.Helper()
	c, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	return c.Front
}

// postAll posts body to url from n clients at once, each on its own
// connection with Expect: 100-continue, and counts the answers (200), the
// 503 busy of the bound on bodies in flight, and anything else.
func postAll(b *testing.B, url string, body []byte, n int) (ok, busy, other int) {
	b.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{ExpectContinueTimeout: 30 * time.Second, DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Expect", "100-continue")
			<-start
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Minute}).Do(req)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && resp.StatusCode == http.StatusOK:
				ok++
			case err == nil && resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(got, []byte("request bytes in flight")):
				busy++
			default:
				if other++; other == 1 {
					b.Logf("a client: %v %s", err, fmt.Sprintf("%.200q", got))
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok, busy, other
}
