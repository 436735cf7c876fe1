//go:build e2e

package tiers_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/fake-llama/faketest"
	. "slurm-llm/endpoints/tiers"
)

// BenchmarkE2EReplicasThroughNginx is issue 9's throughput figure through
// a real nginx with the shipped site and the rendered least_conn upstream:
// 12 clients stream chat completions to the fast tier's URL without pause;
// each replica is the fake llama.cpp with 4 slots, 20 tokens per completion
// at 20 tokens/s per slot. It reports tokens/s with 1 routed replica and
// with 3, and their ratio (the physical limit is 3). No Slurm here: the
// endpoint files are written by hand (BenchmarkE2EReplicasThroughput in
// cmd/llm-upstreams has the keeper and Slurm, without nginx).
func BenchmarkE2EReplicasThroughNginx(b *testing.B) {
	fake, err := faketest.Build(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	n := startNginx(b)
	var heads []head
	for i := range 3 {
		heads = append(heads, startFakeHead(b, fake, fmt.Sprintf("replica-%d", i)))
	}
	u := watcher(n.config(b), Options{Log: hclog.NewNullLogger()})
	for i := 0; i < b.N; i++ {
		var tps [2]float64
		for k, replicas := range []int{1, 3} {
			for j, h := range heads {
				path := filepath.Join(n.endpoints, fmt.Sprintf("fast-%d.json", 500+j))
				if j < replicas {
					n.publish(b, "fast", strconv.Itoa(500+j), h)
				} else if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
			}
			if _, err := u.Pass(context.Background()); err != nil {
				b.Fatal(err)
			}
			waitReply(b, n.Fast, "/v1/models", "nginx routes the fast tier", func(r reply) bool { return r.status == http.StatusOK })
			// Warm-up while nginx's reload takes effect and the slots fill. A
			// request here may meet the reload: nginx closes its idle
			// keep-alive connections then, and a client that sent on one
			// just as it closed gets EOF (HTTP/1.1's race; clients that
			// reuse connections retry, as the OpenAI SDKs do).
			if _, failed := streamLoad(b, n.Fast, 12, 2*time.Second); failed > 0 {
				b.Logf("warm-up after the reload: %d request(s) met the reload", failed)
			}
			var failed int64
			if tps[k], failed = streamLoad(b, n.Fast, 12, 10*time.Second); failed > 0 {
				b.Fatalf("%d requests through nginx failed", failed)
			}
			b.Logf("%d routed replica(s): %.1f tokens/s through nginx", replicas, tps[k])
		}
		b.ReportMetric(tps[0], "tokens/s(1_replica)")
		b.ReportMetric(tps[1], "tokens/s(3_replicas)")
		b.ReportMetric(tps[1]/tps[0], "ratio")
	}
}

// startFakeHead runs the fake llama-server on a free loopback port (4
// slots, 20 tokens at 20 tokens/s each) until the benchmark ends.
func startFakeHead(tb testing.TB, fake, name string) head {
	tb.Helper()
	port := faketest.FreePort(tb)
	cmd := exec.Command(fake, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--parallel", "4",
		"-m", "/models/"+name+".gguf", "--fake-tokens", "20", "--fake-token-rate", "20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	waitUntil(tb, name+" healthy", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return head{name: name, port: port}
}

// streamLoad runs clients that each stream one chat completion after
// another through nginx on port for d, and returns the tokens (SSE data
// chunks with a token's text) received in d, per second, and how many
// requests failed (the first is logged).
func streamLoad(tb testing.TB, port, clients int, d time.Duration) (float64, int64) {
	tb.Helper()
	var tokens, failed atomic.Int64
	var wg sync.WaitGroup
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	end := time.Now().Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := http.Post(url, "application/json",
					strings.NewReader(`{"messages":[{"role":"user","content":"Count."}],"stream":true}`))
				if err != nil {
					if failed.Add(1) == 1 {
						tb.Logf("first failure: %v", err)
					}
					continue
				}
				if resp.StatusCode != http.StatusOK {
					if failed.Add(1) == 1 {
						b, _ := io.ReadAll(resp.Body)
						tb.Logf("first failure: %s: %s", resp.Status, b)
					}
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if line := sc.Text(); strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content":"tok`) && time.Now().Before(end) {
						tokens.Add(1)
					}
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// Tokens after end are not counted, so neither is the time the clients
	// then wait for their last completions.
	return float64(tokens.Load()) / d.Seconds(), failed.Load()
}
