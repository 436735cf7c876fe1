//go:build e2e

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/slurm/slurmtest"
)

// The real llama.cpp lane: the distributed and elastic tiers' e2e tests
// with llama.cpp's own llama-server and ggml-rpc-server instead of the
// fake, so that the facts the fake copies are checked by the project
// itself. It runs when LLAMA_BIN names a build (shared/tools/real-llama:
// llama-server, ggml-rpc-server and their libraries) and LLAMA_MODEL (or
// TINY_MODEL) a model every node can read; it is skipped otherwise (CI has
// no llama.cpp: no registry carries it).

// realLlama is a real llama.cpp build and a model.
type realLlama struct{ bin, model string }

// needRealLlama returns the build the environment names, or skips.
func needRealLlama(t testing.TB) *realLlama {
	t.Helper()
	bin, model := faketest.NeedReal(t, "llama-server", "ggml-rpc-server")
	return &realLlama{bin: bin, model: model}
}

// apply turns a tier config of the fake (e2eConfig, e2eElasticConfig, as
// the site shapes them) into one of the real programs: the same
// placeholders, the real flags, the build's libraries.
func (r *realLlama) apply(config, dir string) string {
	fake := filepath.Join(dir, "fake-llama")
	env := fmt.Sprintf("env = { LD_LIBRARY_PATH = %q }\n", r.bin)
	return strings.NewReplacer(
		fmt.Sprintf("[%q, \"server\", ", fake), fmt.Sprintf("[%q, ", filepath.Join(r.bin, "llama-server")),
		fmt.Sprintf("[%q, \"rpc-server\", \"--host\", \"{addr}\", \"--port\", \"{port}\"]", fake),
		fmt.Sprintf("[%q, \"-H\", \"{addr}\", \"-p\", \"{port}\"]", filepath.Join(r.bin, "ggml-rpc-server")),
		fmt.Sprintf("[%q, \"rpc-server\", ", fake), fmt.Sprintf("[%q, ", filepath.Join(r.bin, "ggml-rpc-server")),
		`"-m", "/models/e2e.gguf", "--metrics", "--fake-load-time", "300ms"`, fmt.Sprintf(`"-m", %q, "--metrics", "-c", "512"`, r.model),
		`"-m", "/models/e2e.gguf", "--metrics", "--fake-load-time", "500ms",
           "--fake-tokens", "2000", "--fake-token-rate", "40"`, fmt.Sprintf(`"-m", %q, "--metrics"`, r.model),
		"[head]\n", "[head]\n"+env,
		"[worker]\n", "[worker]\n"+env,
		`load = "60s"`, `load = "180s"`,
	).Replace(config)
}

// realComplete asks a real head for a short completion that its random
// weights can give (/completion with a grammar: chat trips the output
// parser on random text); it returns the HTTP status and the text.
func realComplete(host string, port int, timeout time.Duration) (int, string, error) {
	body := `{"prompt":"hello","n_predict":8,"grammar":"root ::= [a-z ]+"}`
	client := &http.Client{Timeout: timeout}
	resp, err := client.Post("http://"+net.JoinHostPort(host, strconv.Itoa(port))+"/completion", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestE2ERealLlamaDistributed: the distributed tier with real llama.cpp on
// the namespace cluster: up and answering; then the IPoIB link between the
// head and one worker cut with nothing in flight, and a completion sent
// during the cut: the silent link is found from the kernel's tcp_info (the
// goal: under 5 s of the request meeting it), the head restarts without
// that worker and the tier answers on two nodes.
func TestE2ERealLlamaDistributed(t *testing.T) {
	rl := needRealLlama(t)
	slurmtest.Need(t, "netns")
	tr := setupE2EWith(t, e2eOptions{real: rl, replace: faultReplace(1, "")})
	tr.submit(t)
	tr.waitState(t, endpoints.StateReady, 240*time.Second)
	if code, text, err := realComplete(tr.headHost, tr.headPort, 60*time.Second); err != nil || code != 200 {
		t.Fatalf("a completion from the real head: %d %v %s", code, err, text)
	}
	t.Cleanup(func() { tr.cluster.Fault(t, moduleRoot, "link-restore", "node3", "ib") })
	tr.cluster.Fault(t, moduleRoot, "link-cut", "node3", "ib")
	sent := time.Now()
	ended := make(chan string, 1)
	go func() {
		code, _, err := realComplete(tr.headHost, tr.headPort, 150*time.Second)
		ended <- fmt.Sprintf("%d %v", code, err)
	}()
	e2eWaitFor(t, "the silent link found", 60*time.Second, func() bool {
		return strings.Contains(tr.log(), "a worker's link is silent") || strings.Contains(tr.log(), "head hung")
	})
	t.Logf("real llama.cpp: a link cut found %s after the request was sent (%s)", time.Since(sent).Round(100*time.Millisecond),
		map[bool]string{true: "tcp_info", false: "the stall check"}[strings.Contains(tr.log(), "a worker's link is silent")])
	select {
	case how := <-ended:
		t.Logf("the request sent during the cut ended %s after it was sent: %s", time.Since(sent).Round(100*time.Millisecond), how)
	case <-time.After(60 * time.Second):
		t.Errorf("the request sent during the cut was still open a minute after the silent link was found")
	}
	e2eWaitFor(t, "the tier ready on two nodes", 240*time.Second, func() bool {
		return strings.Contains(tr.log(), "worker dropped") && tr.state() == endpoints.StateReady
	})
	t.Logf("real llama.cpp: serving on two nodes %s after the request", time.Since(sent).Round(100*time.Millisecond))
	if code, text, err := realComplete(tr.headHost, tr.headPort, 60*time.Second); err != nil || code != 200 {
		t.Fatalf("a completion on two nodes: %d %v %s", code, err, text)
	}
}

// TestE2ERealLlamaElastic: the elastic tier with real llama.cpp: serving on
// three nodes, a worker's node taken by science leaves it serving on two,
// and the leader's supervisor frozen for two leases leaves one head at
// most, with the next member serving.
func TestE2ERealLlamaElastic(t *testing.T) {
	rl := needRealLlama(t)
	el := setupElasticWith(t, rl)
	for _, n := range []string{"node1", "node2", "node3"} {
		el.submit(t, n)
	}
	took := el.serving(t, "node3", 3, 240*time.Second)
	t.Logf("real llama.cpp: serving on 3 nodes %s after submission", took.Round(time.Millisecond))
	el.preempt(t, "node1", 60*time.Second)
	took = el.serving(t, "node3", 2, 240*time.Second)
	t.Logf("real llama.cpp: a worker's node taken: serving on 2 nodes %s later", took.Round(time.Millisecond))
}

// TestRealLlamaApply: the lane's config leaves nothing of the fake in the
// distributed and elastic tiers' configs (a pattern that stopped matching
// would run the fake under the real lane's name).
func TestRealLlamaApply(t *testing.T) {
	rl := &realLlama{bin: "/opt/llama/bin", model: "/models/tiny.gguf"}
	dir := "/tmp/e2e-x"
	for name, config := range map[string]string{
		"distributed": asSite(fmt.Sprintf(e2eConfig, dir+"/endpoints", dir, dir, "", 8081, dir, 50052)),
		"elastic":     fmt.Sprintf(e2eElasticConfig, dir+"/endpoints", dir, dir, 8081, dir, dir+"/e2e.gguf"),
	} {
		got := rl.apply(config, dir)
		if strings.Contains(got, "fake") || !strings.Contains(got, "/opt/llama/bin/llama-server") ||
			!strings.Contains(got, "/opt/llama/bin/ggml-rpc-server") || strings.Count(got, "LD_LIBRARY_PATH") != 2 {
			t.Errorf("%s: the real config still names the fake, or lacks the real programs:\n%s", name, got)
		}
	}
}
