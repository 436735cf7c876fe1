//go:build e2e

package front_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/front"
	"slurm-llm/endpoints/front/headload"
	"slurm-llm/endpoints/nginx/nginxtest"
)

// A busy tier through the front door (issue 38), against nginx's shipped
// site and the head itself, side by side in one run: latency at 1, 16 and
// 64 clients, a flood's throughput, and clients through nginx and the
// front door on one head at once. The head is the real llama-server when
// LLAMA_BIN (a llama.cpp build's bin directory) and TINY_MODEL (or
// LLAMA_MODEL) are set (`make bench-real`), else the fake llama.cpp
// answering at a paced rate (CI's figures: what they show of the front
// door's queue is its shape, not the real server's speed).

// busyHead is the head of one run: where it is and what it is.
type busyHead struct {
	port int
	kind string // "real" or "fake"
}

// realLlama names the real llama.cpp build and model from the
// environment (faketest.Real); ok false when either is missing.
func realLlama() (bin, model string, ok bool) {
	bin, model, err := faketest.Real("llama-server")
	return bin, model, err == nil
}

// startBusyHead starts a head of np slots serving model "tiny" with
// --metrics (as the shipped tiers do) and publishes it as tier fast.
func startBusyHead(b *testing.B, w *benchWorld, np int) busyHead {
	b.Helper()
	port := faketest.FreePort(b)
	h := busyHead{port: port, kind: "fake"}
	if bin, model, ok := realLlama(); ok {
		h.kind = "real"
		cmd := exec.Command(filepath.Join(bin, "llama-server"), "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"-m", model, "--alias", "tiny", "-np", strconv.Itoa(np), "-c", strconv.Itoa(512*np), "--metrics", "--no-webui")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+bin)
		if path := os.Getenv("BENCH_BUSY_HEAD_LOG"); path != "" { // its log (timestamps, slot launch and release)
			f, err := os.Create(fmt.Sprintf("%s.np%d", path, np))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { f.Close() })
			cmd.Stdout, cmd.Stderr = f, f
		}
		startCmd(b, cmd)
	} else {
		// 1 ms a token: a 1-token answer in about 1 ms, as the real tiny
		// model's on this machine.
		startProc(b, []string{w.fake, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-m", "tiny",
			"--parallel", strconv.Itoa(np), "--metrics", "--fake-token-rate", "1000"}, io.Discard)
	}
	waitUp(b, fmt.Sprintf("http://127.0.0.1:%d/health", port))
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: strconv.Itoa(100 + np), Host: "127.0.0.1",
		Port: port, State: endpoints.StateReady, Models: []string{"tiny"}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(w.endpoints, e); err != nil {
		b.Fatal(err)
	}
	return h
}

// startCmd starts cmd in its own process group until the benchmark ends
// (startProc's, for a command with its own environment).
func startCmd(b *testing.B, cmd *exec.Cmd) {
	b.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// completionBody is a /completion of n tokens (a grammar, so that the
// real tiny model's random weights give text; ignore_eos, so that it
// gives n).
func completionBody(n int) string {
	return fmt.Sprintf(`{"prompt":"hello","n_predict":%d,"ignore_eos":true,"grammar":"root ::= [a-z ]+","cache_prompt":false}`, n)
}

// busyLoad is load of llama.cpp's /completion.
func busyLoad(url, body string, keys []string, clients int, d time.Duration) loadResult {
	return load(url, "/completion", body, keys, clients, d)
}

// startBareProxy builds and starts testdata/bareproxy (httputil's
// ReverseProxy and nothing else, on one OS thread) in front of head: the
// floor under the front door's figures, Go's net/http without the front
// door's own work. It returns its base URL.
func startBareProxy(b *testing.B, w *benchWorld, head string) string {
	b.Helper()
	bin := filepath.Join(w.dir, "bareproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/bareproxy").CombinedOutput(); err != nil {
		b.Fatalf("build bareproxy: %v\n%s", err, out)
	}
	port := faketest.FreePort(b)
	startProc(b, []string{bin, fmt.Sprintf("127.0.0.1:%d", port), head}, io.Discard)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitUp(b, url+"/health")
	return url
}

// busyDoors starts nginx (the shipped site, one worker) and two front
// doors over w's endpoints: "front" (no identity, arrival order) and
// "front+fs" (static keys, fair share on), each with its metrics
// listener. It returns their base URLs and the keys.
func busyDoors(b *testing.B, w *benchWorld) (urls map[string]string, keys []string) {
	b.Helper()
	n := nginxtest.Start(b, filepath.Join("..", "..", "etc", "nginx", "slurm-llm.conf"), 1)
	urls = map[string]string{"nginx": fmt.Sprintf("http://127.0.0.1:%d", n.Fast)}
	var lines strings.Builder
	for i := range 64 {
		u := fmt.Sprintf("user%02d", i)
		key, _, _, err := access.NewKey(rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, key)
		fmt.Fprintf(&lines, "%s acct-%s %s\n", u, u, key)
	}
	keysFile := filepath.Join(w.dir, "keys")
	if err := os.WriteFile(keysFile, []byte(lines.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	for i, name := range []string{"front", "front+fs"} {
		fport := faketest.FreePort(b)
		cfg := w.config(b, fport, n)
		if i == 0 {
			if out, err := exec.Command(w.bin, "sync", "--config", cfg, "--log-level", "warn").CombinedOutput(); err != nil {
				b.Fatalf("sync: %v\n%s", err, out)
			}
			waitUp(b, urls["nginx"]+"/health")
		}
		// BENCH_BUSY_FRONT: more [front] keys, one per line ("load_refresh = \"1h\""), to compare settings.
		mport := faketest.FreePort(b)
		urls[name+"/status"] = fmt.Sprintf("http://127.0.0.1:%d/status", mport)
		extra := fmt.Sprintf("default_model = \"tiny\"\nmetrics_listen = \"127.0.0.1:%d\"\n%s\n", mport,
			strings.ReplaceAll(os.Getenv("BENCH_BUSY_FRONT"), ";", "\n"))
		if name == "front+fs" {
			extra += fmt.Sprintf("[front.auth]\nmode = \"identify\"\nstatic_keys_file = %q\nslurm_accounts = false\n[front.fair_share]\nenabled = true\n", keysFile)
		}
		raw, _ := os.ReadFile(cfg)
		path := strings.TrimSuffix(cfg, ".toml") + "-" + strconv.Itoa(i) + ".toml"
		if err := os.WriteFile(path, append(raw, extra...), 0o644); err != nil {
			b.Fatal(err)
		}
		urls[name], _ = w.front(b, path, fport)
	}
	return urls, keys
}

// BenchmarkE2EFrontBusy: issue 38's comparison. For each -np (2, and 4
// on the real head): 1, 16 and 64 clients sending 1-token /completion
// requests, and 16 clients sending 48-token ones, directly, through nginx,
// through a bare httputil proxy ("bare": the floor of Go's net/http, see
// startBareProxy) and through the front door with fair share off and on, each target
// alone in turn, in rounds, and then all of them at once, every client
// sending to each target in turn (the rows ending in ",mixed": each
// target's requests meet the others' in the head's slots and queue, and a
// drift of the machine hits all alike); then a flood (16 clients, 48 tokens) through
// nginx and through the front door with fair share; then 16 clients
// through nginx and 16 through the front door (fair share on) at once on
// the one head: each one's share of the answers, and the front door's
// 503s. It prints the table and reports the figures. To trace a
// hand-over: BENCH_BUSY_RUNS ("1x16"), BENCH_BUSY_TARGETS ("front"),
// BENCH_BUSY_FRONT ([front] keys, ';' for a newline) and
// BENCH_BUSY_HEAD_LOG (the real head's log, with its slots' launch and
// release times, to PATH.npN); BENCH_BUSY_NP (one -np); BENCH_BUSY_RUNS=none
// (the flood and the shared head alone); BENCH_BUSY_TRACE (every 250 ms,
// the head's /metrics and what the front door with fair share counts
// there; "front": the front door's alone, "head": the head's alone).
func BenchmarkE2EFrontBusy(b *testing.B) {
	nps := []int{2}
	if _, _, ok := realLlama(); ok {
		nps = []int{2, 4}
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_BUSY_NP")); err == nil && v > 0 { // one -np alone
		nps = []int{v}
	}
	round := 1500 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("BENCH_BUSY_ROUND")); err == nil {
		round = v
	}
	for _, np := range nps {
		w := newBenchWorld(b)
		head := startBusyHead(b, w, np)
		urls, keys := busyDoors(b, w)
		urls["direct"] = fmt.Sprintf("http://127.0.0.1:%d", head.port)
		urls["bare"] = startBareProxy(b, w, urls["direct"])
		targets := []string{"direct", "nginx", "bare", "front", "front+fs"}
		if v := os.Getenv("BENCH_BUSY_TARGETS"); v != "" { // "front,direct": those alone, no flood or shared head
			targets = strings.Split(v, ",")
		}
		keysOf := func(t string) []string {
			if t == "front+fs" {
				return keys
			}
			return nil
		}
		for i := 0; i < b.N; i++ {
			for _, run := range busyRuns() {
				body := completionBody(run.tokens)
				res := map[string]loadResult{}
				for _, t := range targets {
					busyLoad(urls[t], body, keysOf(t), run.clients, 300*time.Millisecond) // warm up
				}
				for range 3 {
					for _, t := range targets {
						prev := res[t]
						prev.add(busyLoad(urls[t], body, keysOf(t), run.clients, round))
						res[t] = prev
					}
				}
				label := fmt.Sprintf("%s,np%d,%dtok,%dc", head.kind, np, run.tokens, run.clients)
				busyLine(b, label, targets, res)
				// The same, the targets' requests interleaved on the head:
				// each client sends to every target in turn.
				inter := map[string]loadResult{}
				for range 3 {
					for t, r := range busyInterleaved(urls, targets, body, keysOf, run.clients, round) {
						prev := inter[t]
						prev.add(r)
						inter[t] = prev
					}
				}
				busyLine(b, label+",mixed", targets, inter)
			}
			if os.Getenv("BENCH_BUSY_TARGETS") == "" {
				busyFlood(b, head, np, urls, keys, round)
				busyStatus(b, urls, "after the flood")
				busyShared(b, head, np, urls, keys, round)
				busyStatus(b, urls, "after the shared head")
			}
		}
	}
}

// busyLine prints and reports one run's p50 per target and what each
// adds over the head reached directly.
func busyLine(b *testing.B, label string, targets []string, res map[string]loadResult) {
	var line []string
	for _, t := range targets {
		slices.Sort(res[t].lat)
		p50 := pct(res[t].lat, .5)
		add := ms(p50 - pct(res["direct"].lat, .5))
		b.ReportMetric(ms(p50), "p50-ms("+t+","+label+")")
		paired := ""
		if d := res[t].paired; len(d) > 0 && t != "direct" {
			slices.Sort(d)
			paired = fmt.Sprintf(", paired %+.2f", ms(pct(d, .5)))
			b.ReportMetric(ms(pct(d, .5)), "paired-added-ms("+t+","+label+")")
		}
		line = append(line, fmt.Sprintf("%s %.2f ms (%+.2f%s, %d answers, %d not 200)", t, ms(p50), add, paired, len(res[t].lat), res[t].failed))
	}
	b.Logf("%-28s p50: %s", label, strings.Join(line, "; "))
}

// busyInterleaved runs clients for d that each send body to every target
// in turn, each target on its own kept-alive connection, starting each
// turn one target further on (so that no target always follows the same
// one): every target's latencies and failures, the requests of all of
// them meeting on the one head. With "direct" among the targets, each
// other target's paired holds, for every turn where both were answered,
// its latency less direct's in that turn: their median is what the
// target adds, free of the head's own spread and of the machine's drift
// (the real tiny model answers one token in about 3.5 or about 6 ms, by
// turns, so a p50 less a p50 can be off by a millisecond either way).
func busyInterleaved(urls map[string]string, targets []string, body string, keysOf func(string) []string, clients int, d time.Duration) map[string]loadResult {
	var mu sync.Mutex
	res := map[string]loadResult{}
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns := make([]*http.Client, len(targets))
			for j := range conns {
				conns[j] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
				defer conns[j].CloseIdleConnections()
			}
			mine := make([]loadResult, len(targets))
			got := make([]time.Duration, len(targets)) // this turn's latencies; -1: failed
			for turn := i; time.Now().Before(end); turn++ {
				for k := range targets {
					j := (turn + k) % len(targets)
					t := targets[j]
					took, err := postOnce(conns[j], urls[t]+"/completion", body, keyOf(keysOf(t), i))
					if err != nil {
						if mine[j].failed++; mine[j].first == nil {
							mine[j].first = err
						}
						got[j] = -1
						continue
					}
					got[j] = took
					mine[j].lat = append(mine[j].lat, took)
				}
				if d := slices.Index(targets, "direct"); d >= 0 && got[d] >= 0 {
					for j := range targets {
						if j != d && got[j] >= 0 {
							mine[j].paired = append(mine[j].paired, got[j]-got[d])
						}
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for j, t := range targets {
				r := res[t]
				r.add(mine[j])
				res[t] = r
			}
		}()
	}
	wg.Wait()
	return res
}

// busyRuns are the runs of BenchmarkE2EFrontBusy (tokens, clients): every
// one, or BENCH_BUSY_RUNS's ("1x16,48x16").
func busyRuns() []struct{ tokens, clients int } {
	all := []struct{ tokens, clients int }{{1, 1}, {1, 16}, {1, 64}, {48, 16}}
	v := os.Getenv("BENCH_BUSY_RUNS")
	if v == "" {
		return all
	}
	var out []struct{ tokens, clients int }
	for _, r := range strings.Split(v, ",") {
		var run struct{ tokens, clients int }
		if _, err := fmt.Sscanf(r, "%dx%d", &run.tokens, &run.clients); err == nil {
			out = append(out, run)
		}
	}
	return out
}

// busyFlood: one user's flood, 16 clients streaming 48-token answers
// back to back, through nginx and through the front door with fair share,
// in turn, 8 rounds (or BENCH_BUSY_FLOOD_ROUNDS) of 2 × round each: the
// tokens each got within its rounds' time. Tokens, not answers: at about
// one answer a second per client, a round's count of whole answers is off
// by up to one per client at either end, as much as the difference to be
// seen; and turns of a few seconds, so that the real head's drift hits
// both alike.
func busyFlood(b *testing.B, head busyHead, np int, urls map[string]string, keys []string, round time.Duration) {
	body := strings.Replace(completionBody(48), `"prompt"`, `"stream":true,"prompt"`, 1)
	got := map[string]int64{}
	rounds := 8
	if v, err := strconv.Atoi(os.Getenv("BENCH_BUSY_FLOOD_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for range rounds {
		for _, t := range []string{"nginx", "front+fs"} {
			var k []string
			if t == "front+fs" {
				k = keys[:1]
			}
			headIdle(b, head)
			stop := busyTrace(b, head, urls, "flood "+t)
			got[t] += floodTokens(urls[t], body, k, 16, 2*round)
			stop()
		}
	}
	ratio := float64(got["front+fs"]) / float64(max(got["nginx"], 1))
	b.ReportMetric(100*ratio, fmt.Sprintf("flood-pct-of-nginx(%s,np%d)", head.kind, np))
	b.Logf("%s,np%d flood (one user, 16 clients streaming 48 tokens, %d x %s each): tokens within the time: nginx %d, front door (fair share) %d: %.1f %%",
		head.kind, np, rounds, 2*round, got["nginx"], got["front+fs"], 100*ratio)
}

// busyTrace, with BENCH_BUSY_TRACE set, logs every 250 ms until the
// returned stop is called what the head has (its /metrics) and what the
// front door with fair share counts there and holds ("head" or "front":
// that one alone).
func busyTrace(b *testing.B, head busyHead, urls map[string]string, what string) (stop func()) {
	mode := os.Getenv("BENCH_BUSY_TRACE")
	if mode == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		client := &http.Client{}
		defer client.CloseIdleConnections()
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			line := "trace " + what + ":"
			if mode != "front" {
				l, err := head.load(client)
				line += fmt.Sprintf(" head %+v %v;", l, err)
			}
			if mode != "head" {
				if st, err := frontStatus(client, urls["front+fs/status"]); err != nil {
					line += fmt.Sprintf(" front+fs /status: %v", err)
				} else {
					line += " front+fs: " + headsLine(st)
				}
			}
			b.Log(line)
		}
	}()
	return func() { close(done) }
}

// load is what the head says it has now (its /metrics).
func (h busyHead) load(client *http.Client) (headload.Load, error) {
	return headload.Read(context.Background(), client, fmt.Sprintf("127.0.0.1:%d", h.port), 5*time.Second)
}

// frontStatus reads a front door's /status at url.
func frontStatus(client *http.Client, url string) (front.Status, error) {
	var st front.Status
	resp, err := client.Get(url)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// headsLine is what st says of tier fast's heads: each one's requests in
// flight there, the others it counted, whether it is failing, and the
// requests held.
func headsLine(st front.Status) string {
	var out []string
	for _, t := range st.Tiers {
		if t.Tier != "fast" {
			continue
		}
		for _, h := range t.Heads {
			out = append(out, fmt.Sprintf("head %s in flight %d, others %d, failing %v, held %d", h.Addr, h.InFlight, h.Others, h.Failing, t.Held))
		}
	}
	return strings.Join(out, "; ")
}

// headIdle waits, within a minute, until the head has nothing in its
// slots or its queue (its /metrics): the streams a turn cut end there
// before the next turn begins, or they would be the next turn's loss.
func headIdle(b *testing.B, head busyHead) {
	b.Helper()
	client := &http.Client{}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := head.load(client)
		if err == nil && l.Total() == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the head is not idle a minute after the load: %+v, %v", l, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floodTokens runs clients that stream body's /completion from url back
// to back for d (client i with keys[i%len(keys)], when given), each on
// its kept-alive connection, and returns the token events they got before
// d was up; the streams still running then are cut.
func floodTokens(url, body string, keys []string, clients int, d time.Duration) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var tokens atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
			defer c.CloseIdleConnections()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/completion", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if key := keyOf(keys, i); key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: ")) && bytes.Contains(line, []byte(`"stop":false`)) && ctx.Err() == nil {
						tokens.Add(1)
					}
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return tokens.Load()
}

// busyStatus logs what each front door's /status says of tier fast's
// heads after a load: nothing in flight, nothing held once every client
// has its answer.
func busyStatus(b *testing.B, urls map[string]string, when string) {
	for _, name := range []string{"front", "front+fs"} {
		st, err := frontStatus(http.DefaultClient, urls[name+"/status"])
		if err != nil {
			b.Logf("%s /status: %v", name, err)
			continue
		}
		b.Logf("%s %s: %s", name, when, headsLine(st))
	}
}

// busyShared: 16 clients through nginx and 16 through the front door (fair
// share on) at once on the one head, 1-token answers: each one's share of
// the answers (the offered load is even), and the front door's non-200s.
func busyShared(b *testing.B, head busyHead, np int, urls map[string]string, keys []string, round time.Duration) {
	body := completionBody(1)
	var viaNginx, viaFront loadResult
	headIdle(b, head)
	defer busyTrace(b, head, urls, "shared")()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); viaNginx = busyLoad(urls["nginx"], body, nil, 16, 4*round) }()
	go func() { defer wg.Done(); viaFront = busyLoad(urls["front+fs"], body, keys, 16, 4*round) }()
	wg.Wait()
	share := float64(len(viaFront.lat)) / float64(max(len(viaFront.lat)+len(viaNginx.lat), 1))
	b.ReportMetric(100*share, fmt.Sprintf("shared-front-pct(%s,np%d)", head.kind, np))
	b.Logf("%s,np%d shared head (16 clients through nginx, 16 through the front door, 1 token, %s): nginx %d answers (p50 %.2f ms), front door %d (p50 %.2f ms, %d not 200): the front door's share %.1f %% of an even load",
		head.kind, np, 4*round, len(viaNginx.lat), ms(pct(viaNginx.lat, .5)), len(viaFront.lat), ms(pct(viaFront.lat, .5)), viaFront.failed, 100*share)
}
