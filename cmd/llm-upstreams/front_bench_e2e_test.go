//go:build e2e

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkE2EFrontPartialPreemption is issue 19's preemption figure: 20
// requests/s for the fast tier through the front door and 20/s through
// nginx's fast port (the shipped site, reloaded by watch), each on a new
// connection, in the same run, while a science job takes the fast tier's
// node and the tier comes back on a free one. It reports the failed
// requests each way and the longest a request took through the front door
// (its hold).
func BenchmarkE2EFrontPartialPreemption(b *testing.B) {
	w := newFrontWorld(b, frontOpts{nginx: true})
	w.up(1)
	nginx := fmt.Sprintf("http://127.0.0.1:%d", w.nginx.Fast)
	w.waitFor("nginx routing the fast tier", 30*time.Second, func() bool {
		return chat(&http.Client{Timeout: 10 * time.Second}, nginx, "qwen-a", false).ok()
	})
	for i := 0; i < b.N; i++ {
		node := w.tier("fast").Heads[0].Node
		ctx, stop := context.WithCancel(context.Background())
		fl, fwg := startRateLoad(ctx, w.url, "qwen-a", 20)
		nl, nwg := startRateLoad(ctx, nginx, "qwen-a", 20)
		time.Sleep(2 * time.Second)
		science := w.preemptFast(node)
		w.waitFor("the fast tier routed on another node", 120*time.Second, func() bool {
			hs := w.tier("fast").Heads
			return len(hs) == 1 && hs[0].Node != node
		})
		time.Sleep(3 * time.Second)
		stop()
		fwg.Wait()
		nwg.Wait()
		_ = exec.Command("scancel", science).Run()
		b.Logf("cycle %d (%s → %s): front door %d of %d failed, longest %.2f s; nginx %d of %d failed",
			i+1, node, w.tier("fast").Heads[0].Node, fl.failed.Load(), fl.sent.Load(), time.Duration(fl.longest.Load()).Seconds(),
			nl.failed.Load(), nl.sent.Load())
		if len(nl.failures) > 0 {
			b.Logf("nginx's first failures: %v", nl.failures[:min(3, len(nl.failures))])
		}
		if len(fl.failures) > 0 {
			b.Errorf("front door failures: %v", fl.failures)
		}
		b.ReportMetric(float64(fl.failed.Load()), "failed(front)")
		b.ReportMetric(float64(nl.failed.Load()), "failed(nginx)")
		b.ReportMetric(time.Duration(fl.longest.Load()).Seconds(), "longest-s(front)")
		w.waitFor("the science job gone", 60*time.Second, func() bool { return len(w.queue("vasp-"+w.id)) == 0 })
	}
}

// rawKeepAlive is a client on one kept-alive connection that sends its
// next request without checking the connection first (Python's
// http.client does so; pooled clients check an idle connection first and
// meet only the race). A request that gets EOF or a reset counts as failed
// and the client connects again.
type rawKeepAlive struct {
	ok, failed atomic.Int64
	// conns counts the connections the clients opened (n when none had to
	// connect again).
	conns atomic.Int64
	mu    sync.Mutex
	first []string
}

// startRawKeepAlive runs n such clients against addr, each pausing think
// between an answer and its next request (its connection idle meanwhile,
// as a person's client is), until ctx ends.
func startRawKeepAlive(ctx context.Context, addr, path, body string, n int, think time.Duration) (*rawKeepAlive, *sync.WaitGroup) {
	l := &rawKeepAlive{}
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, len(body), body)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn net.Conn
			var br *bufio.Reader
			defer func() {
				if conn != nil {
					conn.Close()
				}
			}()
			for ctx.Err() == nil {
				if conn == nil {
					c, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						l.fail(err.Error())
						time.Sleep(50 * time.Millisecond)
						continue
					}
					l.conns.Add(1)
					conn, br = c, bufio.NewReader(c)
				}
				_ = conn.SetDeadline(time.Now().Add(time.Minute))
				resp, err := func() (*http.Response, error) {
					if _, err := io.WriteString(conn, req); err != nil {
						return nil, err
					}
					return http.ReadResponse(br, nil)
				}()
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				switch {
				case err != nil:
					if ctx.Err() == nil {
						l.fail(err.Error())
					}
					conn.Close()
					conn = nil
				case resp.StatusCode != http.StatusOK:
					l.fail(resp.Status)
				default:
					l.ok.Add(1)
				}
				if resp != nil && resp.Close && conn != nil {
					conn.Close()
					conn = nil
				}
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		}()
	}
	return l, &wg
}

func (l *rawKeepAlive) fail(why string) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.first) < 5 {
		l.first = append(l.first, why)
	}
}

// BenchmarkE2EFrontRoutingChanges is issue 19's keep-alive figure: 32
// clients that reuse their connections without checking them send
// fast-tier requests through the front door, and 32 through nginx, in the
// same run, each pausing 300 ms between an answer and its next request
// (its connection idle meanwhile, as a person's client is), while the
// reasoning tier is unrouted and routed again 50 times (its head killed;
// the supervisor starts it again): 100 routing changes, each an nginx
// reload. It reports the EOFs and resets each way.
func BenchmarkE2EFrontRoutingChanges(b *testing.B) {
	w := newFrontWorld(b, frontOpts{nginx: true})
	w.up(1)
	nginx := fmt.Sprintf("127.0.0.1:%d", w.nginx.Fast)
	w.waitFor("nginx routing the fast tier", 30*time.Second, func() bool {
		return chat(&http.Client{Timeout: 10 * time.Second}, "http://"+nginx, "qwen-a", false).ok()
	})
	body := `{"model":"qwen-a","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for i := 0; i < b.N; i++ {
		ctx, stop := context.WithCancel(context.Background())
		fl, fwg := startRawKeepAlive(ctx, strings.TrimPrefix(w.url, "http://"), "/v1/chat/completions", body, 32, 300*time.Millisecond)
		nl, nwg := startRawKeepAlive(ctx, nginx, "/v1/chat/completions", body, 32, 300*time.Millisecond)
		before := w.routings.Load()
		const cycles = 50
		for c := 0; c < cycles; c++ {
			host, _, _ := net.SplitHostPort(w.tier("reasoning").Heads[0].Addr)
			for _, pid := range pidsOf("fake-llama server --host " + host + " ") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			w.waitFor("the reasoning tier unrouted", 30*time.Second, func() bool { return len(w.tier("reasoning").Heads) == 0 })
			w.waitFor("the reasoning tier routed again", 60*time.Second, func() bool { return len(w.tier("reasoning").Heads) == 1 })
		}
		time.Sleep(time.Second)
		stop()
		fwg.Wait()
		nwg.Wait()
		changes := w.routings.Load() - before
		b.Logf("%d routing changes: front door %d answered, %d failed %v, %d connections; nginx %d answered, %d failed %v, %d connections",
			changes, fl.ok.Load(), fl.failed.Load(), fl.first, fl.conns.Load(), nl.ok.Load(), nl.failed.Load(), nl.first, nl.conns.Load())
		if fl.failed.Load() > 0 {
			b.Errorf("%d requests through the front door failed", fl.failed.Load())
		}
		b.ReportMetric(float64(changes), "routing-changes")
		b.ReportMetric(float64(fl.failed.Load()), "failed(front)")
		b.ReportMetric(float64(nl.failed.Load()), "failed(nginx)")
	}
}
