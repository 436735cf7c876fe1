//go:build e2e

package front_test

import (
	"bufio"
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
	"slurm-llm/endpoints/nginx/nginxtest"
)

// The front door's speed and footprint, each against the same heads
// reached directly and, where the issue asks, through the shipped nginx
// site, in the same run. Everything runs as the real programs on
// loopback: `llm-upstreams front` and `llm-upstreams sync` (built here),
// nginx, and the fake llama.cpp as heads; endpoint files are written by
// hand (no Slurm: the scheduler check is off). Needs root and nginx.

// benchWorld is an endpoint directory, the programs built, and the heads.
type benchWorld struct {
	dir, bin, fake string
	endpoints      string
	heads          []int // head ports
}

func newBenchWorld(b *testing.B) *benchWorld {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root (nginx, endpoint files owned by root)")
	}
	w := &benchWorld{dir: b.TempDir()}
	w.endpoints = filepath.Join(w.dir, "endpoints")
	if err := os.MkdirAll(w.endpoints, 0o755); err != nil {
		b.Fatal(err)
	}
	var err error
	if w.fake, err = faketest.Build(w.dir); err != nil {
		b.Fatal(err)
	}
	w.bin = filepath.Join(w.dir, "llm-upstreams")
	if out, err := exec.Command("go", "build", "-o", w.bin, "slurm-llm/cmd/llm-upstreams").CombinedOutput(); err != nil {
		b.Fatalf("build llm-upstreams: %v\n%s", err, out)
	}
	return w
}

// startProc runs argv in its own process group until the benchmark ends.
func startProc(b *testing.B, argv []string, out io.Writer) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	// Its own group, killed with the benchmark's process if that dies
	// (an orphan would hold the ports, and the e2e lock, for ever).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = out, out
	if v := os.Getenv("BENCH_FRONT_ENV"); v != "" && strings.HasSuffix(argv[0], "llm-upstreams") {
		cmd.Env = append(os.Environ(), strings.Fields(v)...)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// head starts a fake llama-server (model name, extra flags) on a free
// port and publishes it as tier fast, job id.
func (w *benchWorld) head(b *testing.B, id int, model string, flags ...string) int {
	b.Helper()
	port := faketest.FreePort(b)
	startProc(b, append([]string{w.fake, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-m", model}, flags...), io.Discard)
	waitUp(b, fmt.Sprintf("http://127.0.0.1:%d/health", port))
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: strconv.Itoa(id), Host: "127.0.0.1",
		Port: port, State: endpoints.StateReady, Models: []string{model}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(w.endpoints, e); err != nil {
		b.Fatal(err)
	}
	w.heads = append(w.heads, port)
	return port
}

// config is an upstreams.toml for these endpoints: the front door on
// frontPort, nginx as given (or none).
func (w *benchWorld) config(b *testing.B, frontPort int, n *nginxtest.Nginx) string {
	b.Helper()
	out, test, reload := filepath.Join(w.dir, "out"), `["true"]`, `["true"]`
	if n != nil {
		q := func(argv []string) string { s, _ := json.Marshal(argv); return string(s) }
		out, test, reload = n.Out, q(n.TestArgv()), q(n.ReloadArgv())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(w.dir, "upstreams.toml")
	body := fmt.Sprintf(`endpoint_dir = %q
output_dir = %q
lock_file = "%[3]s/lock"
keeper_config = ""
allowed_owners = ["0"]
allowed_networks = ["127.0.0.0/8"]
[tiers.fast]
[tiers.reasoning]
[nginx]
test = %[4]s
reload = %[5]s
[scheduler]
check = false
[front]
listen = "127.0.0.1:%[6]d"
access_log = ""
`, w.endpoints, out, w.dir, test, reload, frontPort)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// front starts `llm-upstreams front` and waits until it routes to every
// head; it returns its base URL and its process.
func (w *benchWorld) front(b *testing.B, cfg string, port int) (string, *exec.Cmd) {
	b.Helper()
	cmd := startProc(b, []string{w.bin, "front", "--config", cfg, "--log-level", "warn"}, os.Stderr)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitUp(b, url+"/v1/models")
	return url, cmd
}

// latencies runs clients that post body to url for d, each on its
// kept-alive connection, back to back, and returns every request's
// latency (to the answer's last byte), sorted; a failure fails the
// benchmark. With keys, client i sends keys[i%len(keys)] as its bearer
// token.
func latencies(b *testing.B, url, body string, keys []string, clients int, d time.Duration) []time.Duration {
	b.Helper()
	r := load(url, "/v1/chat/completions", body, keys, clients, d)
	if r.failed > 0 {
		b.Logf("%s: %v", url, r.first)
		b.Fatalf("%s: %d requests failed", url, r.failed)
	}
	return r.lat
}

// loadResult is what one load run got: every 200's latency, sorted, how
// many requests failed (an error, or another status), and the first
// failure.
type loadResult struct {
	lat    []time.Duration
	failed int
	first  error
	paired []time.Duration // busyInterleaved's: each turn's latency less direct's in that turn
}

// add takes o's latencies, failures and pairs into r (r's first failure
// stays the first).
func (r *loadResult) add(o loadResult) {
	r.lat, r.paired, r.failed = append(r.lat, o.lat...), append(r.paired, o.paired...), r.failed+o.failed
	if r.first == nil {
		r.first = o.first
	}
}

// postOnce posts body to url on c as JSON (with key as its bearer token,
// when given) and reads the whole answer: its latency, or why it failed
// (an error, or a status other than 200).
func postOnce(c *http.Client, url, body, key string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), err
}

// keyOf is client i's bearer token from keys ("" when none are given).
func keyOf(keys []string, i int) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[i%len(keys)]
}

// load runs clients that post body to url+path for d, back to back, each
// on its kept-alive connection (client i with keys[i%len(keys)] as its
// bearer token, when given); a failed request is followed by a 10 ms
// pause (a 503's Retry-After, shortened).
func load(url, path, body string, keys []string, clients int, d time.Duration) loadResult {
	var mu sync.Mutex
	var res loadResult
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
			defer c.CloseIdleConnections()
			var mine loadResult
			for time.Now().Before(end) {
				took, err := postOnce(c, url+path, body, keyOf(keys, i))
				if err != nil {
					if mine.failed++; mine.first == nil {
						mine.first = err
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mine.lat = append(mine.lat, took)
			}
			mu.Lock()
			res.add(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(res.lat)
	return res
}

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkE2EFrontLatency: the latency the front door adds over calling
// the head directly, beside nginx's (the shipped site, one worker), on the
// same fake head in one run (issue 27): 1 and 16 clients on kept-alive
// connections, small non-streaming chat requests (one token, answered at
// once) and short streams (16 tokens, unpaced). The front door runs as
// shipped (max_procs = 1: "front") and on every core ("front*"). All are
// measured in turn, 1.5 s each, in 4 rounds, so that drift on a busy
// machine hits all alike; it prints each one's p50 and p99, what each
// proxy adds at p50 and p99, and each proxy's CPU time and context
// switches per request, and the front doors' heap allocations per request.
func BenchmarkE2EFrontLatency(b *testing.B) {
	w := newBenchWorld(b)
	n := nginxtest.Start(b, filepath.Join("..", "..", "etc", "nginx", "slurm-llm.conf"), 1)
	head := w.head(b, 101, "tiny", "--parallel", "64", "--fake-tokens", "16", "--fake-token-rate", "0")
	fport := faketest.FreePort(b)
	cfg := w.config(b, fport, n)
	if out, err := exec.Command(w.bin, "sync", "--config", cfg, "--log-level", "warn").CombinedOutput(); err != nil {
		b.Fatalf("sync: %v\n%s", err, out)
	}
	nginx := fmt.Sprintf("http://127.0.0.1:%d", n.Fast)
	waitUp(b, nginx+"/v1/models")
	// Each front door serves /metrics, whose go_memstats_mallocs_total
	// gives its allocations per request (one scrape per measurement among
	// thousands of requests).
	raw, _ := os.ReadFile(cfg)
	listen := fmt.Sprintf("listen = \"127.0.0.1:%d\"", fport)
	mport, amport := faketest.FreePort(b), faketest.FreePort(b)
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(raw), listen,
		fmt.Sprintf("%s\nmetrics_listen = \"127.0.0.1:%d\"", listen, mport), 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	front, proc := w.front(b, cfg, fport)
	// The same front door on every core (max_procs = 0, Go's default).
	aport := faketest.FreePort(b)
	acfg := strings.TrimSuffix(cfg, ".toml") + "-allcores.toml"
	raw = []byte(strings.Replace(string(raw), listen,
		fmt.Sprintf("listen = \"127.0.0.1:%d\"\nmetrics_listen = \"127.0.0.1:%d\"\nmax_procs = 0", aport, amport), 1))
	if err := os.WriteFile(acfg, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	allCores, aproc := w.front(b, acfg, aport)
	direct := fmt.Sprintf("http://127.0.0.1:%d", head)
	targets := []struct {
		name, url string
		pgid      int    // the proxy's process group, for its CPU time
		metrics   string // a front door's /metrics, for its allocations
	}{{"direct", direct, 0, ""}, {"front", front, proc.Process.Pid, fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)},
		{"front*", allCores, aproc.Process.Pid, fmt.Sprintf("http://127.0.0.1:%d/metrics", amport)}, {"nginx", nginx, n.PID, ""}}
	for i := 0; i < b.N; i++ {
		for _, kind := range []struct{ name, body string }{
			{"chat", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
			{"stream", `{"model":"tiny","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			for _, clients := range []int{1, 16} {
				res := map[string][]time.Duration{}
				cpu := map[string]time.Duration{}
				switches := map[string]int64{}
				allocs := map[string]float64{}
				for _, t := range targets {
					latencies(b, t.url, kind.body, nil, clients, 300*time.Millisecond) // warm the connections
				}
				for range 4 {
					for _, t := range targets {
						before, sw, al := groupCPU(b, t.pgid), groupSwitches(t.pgid), mallocs(b, t.metrics)
						res[t.name] = append(res[t.name], latencies(b, t.url, kind.body, nil, clients, 1500*time.Millisecond)...)
						cpu[t.name] += groupCPU(b, t.pgid) - before
						switches[t.name] += groupSwitches(t.pgid) - sw
						allocs[t.name] += mallocs(b, t.metrics) - al
					}
				}
				label := fmt.Sprintf("%s,%d-clients", kind.name, clients)
				for _, t := range targets {
					slices.Sort(res[t.name])
					perReq := ""
					if t.pgid != 0 {
						us := float64(cpu[t.name].Microseconds()) / float64(len(res[t.name]))
						cs := float64(switches[t.name]) / float64(len(res[t.name]))
						perReq = fmt.Sprintf(", per request its CPU %.1f µs and %.2f context switches", us, cs)
						b.ReportMetric(us, "cpu-us/req("+t.name+","+label+")")
						if t.metrics != "" {
							a := allocs[t.name] / float64(len(res[t.name]))
							perReq += fmt.Sprintf(", %.0f allocations", a)
							b.ReportMetric(a, "allocs/req("+t.name+","+label+")")
						}
					}
					b.Logf("%-18s %-6s %6d requests: p50 %.3f ms, p99 %.3f ms%s", label, t.name, len(res[t.name]),
						ms(pct(res[t.name], .5)), ms(pct(res[t.name], .99)), perReq)
				}
				for _, via := range []string{"front", "front*", "nginx"} {
					add50 := pct(res[via], .5) - pct(res["direct"], .5)
					add99 := pct(res[via], .99) - pct(res["direct"], .99)
					b.ReportMetric(ms(add50), "added-p50-ms("+via+","+label+")")
					b.ReportMetric(ms(add99), "added-p99-ms("+via+","+label+")")
					b.Logf("%-18s %s adds p50 %.3f ms, p99 %.3f ms", label, via, ms(add50), ms(add99))
				}
			}
		}
	}
}

// groupCPU is the CPU time (user and system) of every process in process
// group pgid so far; 0 for pgid 0.
// mallocs is go_memstats_mallocs_total in the /metrics at url (0 for
// none): the heap allocations a Go process has made since it started.
func mallocs(b *testing.B, url string) float64 {
	if url == "" {
		return 0
	}
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_mallocs_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatalf("%s: go_memstats_mallocs_total %q", url, v)
			}
			return f
		}
	}
	b.Fatalf("%s has no go_memstats_mallocs_total", url)
	return 0
}

func groupCPU(b *testing.B, pgid int) time.Duration {
	if pgid == 0 {
		return 0
	}
	des, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, de := range des {
		raw, err := os.ReadFile("/proc/" + de.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp … utime(14) stime(15): comm may hold spaces.
		i := strings.LastIndexByte(string(raw), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 13 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// groupSwitches is the context switches (voluntary and not) of every
// thread of every process in process group pgid so far; 0 for pgid 0.
func groupSwitches(pgid int) int64 {
	if pgid == 0 {
		return 0
	}
	var n int64
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/status")
	for _, path := range tasks {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var pg, sw int64
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch k {
			case "NSpgid":
				f := strings.Fields(v)
				if len(f) > 0 {
					pg, _ = strconv.ParseInt(f[0], 10, 64)
				}
			case "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches":
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				sw += x
			}
		}
		if pg == int64(pgid) {
			n += sw
		}
	}
	return n
}

// BenchmarkE2EFront1000Streams: 1,000 concurrent SSE streams (chat, 60
// tokens at 10 tokens/s each: 6 s, so that opening 1,000 connections is a
// small part of the time measured) over four fake heads of 250 slots, directly
// and then through the front door: every stream must end with [DONE]; it
// reports tokens/s both ways and the front door's peak RSS (VmHWM).
func BenchmarkE2EFront1000Streams(b *testing.B) {
	w := newBenchWorld(b)
	for i := range 4 {
		w.head(b, 201+i, "tiny", "--parallel", "250", "--fake-tokens", "60", "--fake-token-rate", "10")
	}
	fport := faketest.FreePort(b)
	front, proc := w.front(b, w.config(b, fport, nil), fport)
	for i := 0; i < b.N; i++ {
		var direct []string
		for _, p := range w.heads {
			direct = append(direct, fmt.Sprintf("http://127.0.0.1:%d", p))
		}
		dTPS, dBad := streams(b, direct, 1000)
		fTPS, fBad := streams(b, []string{front}, 1000)
		rss := peakRSS(b, proc.Process.Pid)
		b.Logf("1000 streams: direct %.0f tokens/s (%d incomplete), front door %.0f tokens/s (%d incomplete), %.1f%% of direct; front door peak RSS %.1f MB",
			dTPS, dBad, fTPS, fBad, 100*fTPS/dTPS, rss)
		if dBad+fBad > 0 {
			b.Errorf("%d direct and %d front-door streams did not end with [DONE]", dBad, fBad)
		}
		b.ReportMetric(dTPS, "tokens/s(direct)")
		b.ReportMetric(fTPS, "tokens/s(front)")
		b.ReportMetric(100*fTPS/dTPS, "%-of-direct")
		b.ReportMetric(rss, "front-peak-RSS-MB")
	}
}

// streams runs n concurrent streams, one each, spread over the base URLs,
// and returns the tokens per second from the first request to the last
// [DONE], and how many streams did not end with [DONE].
func streams(b *testing.B, bases []string, n int) (float64, int) {
	b.Helper()
	var tokens, bad atomic.Int64
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"Count."}]}`
			resp, err := c.Post(bases[i%len(bases)]+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				bad.Add(1)
				return
			}
			defer resp.Body.Close()
			done := false
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, `"content":"tok`) {
					tokens.Add(1)
				}
				done = done || line == "data: [DONE]"
			}
			if !done || resp.StatusCode != http.StatusOK {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(tokens.Load()) / time.Since(start).Seconds(), int(bad.Load())
}

// peakRSS is a process's peak resident set (VmHWM), in MB.
func peakRSS(b *testing.B, pid int) float64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
