//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/front"
	"slurm-llm/endpoints/nginx/nginxtest"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/slurm/slurmtest"
)

// The front door on the namespace cluster: two tiers of the real
// llm-supervisor running the fake llama.cpp, kept queued by an in-process
// keeper: "fast" in router mode (models qwen-a and qwen-b) and "reasoning"
// (one model, OR1-Behemoth), each its own whole node (--exclusive), so a
// one-node science job on the fast tier's node leaves a free node for it
// to come back to. The front door runs in process as `llm-upstreams
// front` wires it (its own updater with the real squeue, routes in
// memory, /v1/models of the heads read every second), listening on
// 127.0.0.1; watch runs beside it, with a private real nginx when the
// world asks for one (the same run compares the two).

// frontOpts shape a front world.
type frontOpts struct {
	// reasoningLoad is the reasoning head's load time (the fake's
	// --fake-load-time); 0: 300 ms.
	reasoningLoad time.Duration
	// fastReplicas runs the fast tier as this many kept replicas (one job
	// each; 0 or 1: one job).
	fastReplicas int
	// nginx runs watch with a private real nginx (the shipped site).
	nginx bool
	// hold is the fast tier's [front] hold; 0: the default.
	hold time.Duration
	// fastTokens and fastRate shape the fast tier's answers (0: 8 tokens
	// at 40 tokens/s); drainBudget is its [drain] budget ("": the
	// default).
	fastTokens  int
	fastRate    int
	drainBudget string
	// noReasoning leaves the reasoning tier out of the keeper (its nodes
	// for more fast replicas).
	noReasoning bool
	// shipped takes the fast tier's timeouts and drain, the keeper's
	// release and the front door's hold_unknown and fast hold from the
	// shipped etc/ files instead of the test's quicker values
	// (front_drain_e2e_test.go).
	shipped bool
	// quietKeeper writes the keeper's log to <dir>/keeper.log, not the
	// test's (a benchmark's log keeps only its first 10 lines).
	quietKeeper bool
	// slotSave runs the fast tier as a single-model head (qwen-a, 2
	// slots) that saves its slots at the drain into <dir>/kv, which the
	// front door reads ([head] and [front] slot_save_dir).
	slotSave bool
	// real runs that single-model head as a real llama-server of this
	// build (the real lane; with slotSave): realArgs are its flags after
	// the model, alias and address.
	real     *realLlama
	realArgs []string
}

type frontWorld struct {
	*e2eController
	id       string
	cluster  slurmtest.Cluster
	fastJob  string // job names
	reasJob  string
	fd       *front.Server
	ucfg     config.Config
	url      string // the front door, http://127.0.0.1:PORT
	nginx    *nginxtest.Nginx
	access   *accessLog
	closed   sync.Once
	passes   atomic.Int64 // the front door's passes
	routings atomic.Int64 // passes that changed what the front door routes
}

func newFrontWorld(t testing.TB, o frontOpts) *frontWorld {
	t.Helper()
	cluster := slurmtest.Need(t, "netns")
	e, id := newE2EController(t, "front")
	w := &frontWorld{e2eController: e, id: id, cluster: cluster, fastJob: "llm-ff-" + id, reasJob: "llm-fr-" + id}
	if err := os.MkdirAll(filepath.Join(w.dir, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"qwen-a", "qwen-b"} {
		w.write(filepath.Join("models", m+".gguf"), "fake weights\n")
	}
	load := o.reasoningLoad
	if load == 0 {
		load = 300 * time.Millisecond
	}
	tokens, rate := 8, 40
	if o.fastTokens > 0 {
		tokens, rate = o.fastTokens, o.fastRate
	}
	fast := frontTier(w.dir, "fast", freePort(t), "--models-dir", w.dir+"/models", "--parallel", "16",
		"--fake-load-time", "200ms", "--fake-tokens", strconv.Itoa(tokens), "--fake-token-rate", strconv.Itoa(rate))
	frontSlots := ""
	if o.slotSave {
		kv := filepath.Join(w.dir, "kv")
		if err := os.MkdirAll(kv, 0o755); err != nil {
			t.Fatal(err)
		}
		fast = frontTier(w.dir, "fast", freePort(t), "-m", w.dir+"/models/qwen-a.gguf", "--alias", "qwen-a", "--parallel", "2",
			"--fake-load-time", "200ms", "--fake-tokens", strconv.Itoa(tokens), "--fake-token-rate", strconv.Itoa(rate))
		if o.real != nil {
			fast = o.real.tier(w.dir, "fast", freePort(t), append([]string{"-m", o.real.model, "--alias", "qwen-a"}, o.realArgs...)...)
		}
		fast = strings.Replace(fast, "\n[timeouts]", fmt.Sprintf("slot_save_dir = %q\n\n[timeouts]", kv), 1)
		frontSlots = fmt.Sprintf("slot_save_dir = %q\n", kv)
	}
	if o.drainBudget != "" {
		fast += fmt.Sprintf("\n[drain]\nbudget = %q\n", o.drainBudget)
	}
	var sh shippedValues
	if o.shipped {
		sh = readShipped(t)
		fast = sh.fastTier(fast)
	}
	w.write("fast.toml", fast)
	w.write("reasoning.toml", frontTier(w.dir, "reasoning", freePort(t), "-m", "/models/big.gguf", "--alias", "OR1-Behemoth",
		"--parallel", "2", "--fake-load-time", load.String(), "--fake-tokens", "8", "--fake-token-rate", "40"))
	for _, tier := range []string{"fast", "reasoning"} {
		w.write(tier+".sh", fmt.Sprintf("#!/bin/bash\nexec %s/llm-supervisor run --config %s/%s.toml\n", w.dir, w.dir, tier))
	}
	replicas := ""
	if o.fastReplicas > 1 {
		replicas = fmt.Sprintf("[tiers.fast.replicas]\nmin = %d\nmax = %d\n", o.fastReplicas, o.fastReplicas)
	}
	reasoning := fmt.Sprintf(`[tiers.reasoning]
job_name = %[2]q
script = "%[1]s/reasoning.sh"
sbatch_args = ["-p", "gpu_ai", "-N1", "--exclusive", "--requeue", "--open-mode=append", "-o", "%[1]s/reasoning-%%j.out", "-D", %[1]q]
backoff_initial = "1h"
backoff_max = "1h"
max_submits_per_hour = 20
`, w.dir, w.reasJob)
	if o.noReasoning {
		reasoning = ""
	}
	w.write("keeper.toml", fmt.Sprintf(`state_dir = "%[1]s/keeper"
endpoint_dir = "%[1]s/endpoints"
%[5]s[tiers.fast]
job_name = %[2]q
script = "%[1]s/fast.sh"
sbatch_args = ["-p", "gpu_ai", "-N1", "--exclusive", "--requeue", "--open-mode=append", "-o", "%[1]s/fast-%%j.out", "-D", %[1]q]
backoff_initial = "1h"
backoff_max = "1h"
max_submits_per_hour = 20
%[3]s%[4]s`, w.dir, w.fastJob, replicas, reasoning, sh.keeperKeys()))
	nginxCfg := "[nginx]\ntest = [\"true\"]\nreload = [\"true\"]\n"
	out := w.dir + "/out"
	if o.nginx {
		w.nginx = nginxtest.Start(t, filepath.Join("..", "..", "etc", "nginx", "slurm-llm.conf"), 2)
		q := func(argv []string) string { b, _ := json.Marshal(argv); return string(b) }
		nginxCfg = fmt.Sprintf("[nginx]\ntest = %s\nreload = %s\n", q(w.nginx.TestArgv()), q(w.nginx.ReloadArgv()))
		out = w.nginx.Out
	}
	hold, holdUnknown := "", "15s"
	if o.hold > 0 {
		hold = fmt.Sprintf("[front.tiers.fast]\nhold = %q\n", o.hold.String())
	}
	if o.shipped {
		hold = fmt.Sprintf("[front.tiers.fast]\nhold = %q\n", sh.fastHold)
		holdUnknown = sh.holdUnknown.String()
	}
	w.write("upstreams.toml", fmt.Sprintf(`endpoint_dir = "%[1]s/endpoints"
output_dir = %[5]q
lock_file = "%[1]s/lock"
state_dir = "%[1]s/state"
keeper_config = "%[1]s/keeper.toml"
allowed_owners = ["0"]
allowed_networks = ["10.77.0.0/16"]
[tiers.fast]
job_name = %[2]q
[tiers.reasoning]
job_name = %[3]q
%[4]s[front]
listen = "127.0.0.1:%[7]d"
models_refresh = "1s"
hold_unknown = %[8]q
%[9]s[front.tiers.reasoning]
hold = "60s"
models = ["OR1-Behemoth"]
%[6]s`, w.dir, w.fastJob, w.reasJob, nginxCfg, out, hold, freePort(t), holdUnknown, frontSlots))
	var klog io.Writer = tbWriter{t: t}
	if o.quietKeeper {
		f, err := os.Create(filepath.Join(w.dir, "keeper.log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		klog = f
	}
	w.ucfg = w.start(klog, func(tiers.Report, time.Time) {})
	w.startFront(w.ucfg)
	t.Cleanup(w.close)
	return w
}

// frontTier is a one-node tier of the fake llama.cpp under dir.
func frontTier(dir, tier string, port int, headArgs ...string) string {
	argv := append([]string{dir + "/fake-llama", "server", "--host", "{addr}", "--port", "{port}", "--metrics"}, headArgs...)
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`
tier = %[4]q
kind = "single"
endpoint_dir = "%[1]s/endpoints"
log_dir = "%[1]s/logs"
node_address = "slurm"

[head]
command = [%[2]s]
port = %[3]d

[timeouts]
load = "60s"
health_interval = "500ms"
stop_grace = "3s"
heartbeat = "1s"
lease = "10s"

# Tests kill heads again and again: restart them at once every time.
[restart]
initial_backoff = "100ms"
max_backoff = "200ms"
max_failures = 1000
`, dir, strings.Join(quoted, ", "), port, tier)
}

// pidsOf lists the processes whose command line matches pattern (pgrep
// -f), this test process left out.
func pidsOf(pattern string) []int {
	out, _ := exec.Command("pgrep", "-f", pattern).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startFront runs the front door as runFront wires it: an updater of its
// own routing in memory, the heads' models read, an HTTP server with the
// config's limits; all until the controller shuts down.
func (w *frontWorld) startFront(cfg config.Config) {
	w.t.Helper()
	w.access = &accessLog{w: w}
	w.fd = front.New(cfg.Front, front.Options{Log: hclog.NewNullLogger(), AccessLog: w.access})
	var last atomic.Value
	count := tiers.ConsumerFunc(func(_ context.Context, rep *tiers.Report) error {
		w.passes.Add(1)
		key := routedKey(*rep)
		if prev, _ := last.Load().(string); prev != key {
			last.Store(key)
			w.routings.Add(1)
		}
		return nil
	})
	u := tiers.New(cfg.Watcher, tiers.Options{Log: hclog.NewNullLogger(), Scheduler: slurmJobs{c: w.c}, Queue: w.c,
		Consumers: []tiers.Consumer{w.fd, count}, ReadOnly: true})
	ln, err := net.Listen("tcp", cfg.Front.Listen)
	if err != nil {
		w.t.Fatal(err)
	}
	w.url = "http://" + ln.Addr().String()
	srv := frontServer(cfg.Front, w.fd)
	w.done.Add(3)
	go func() { defer w.done.Done(); _ = u.Watch(w.ctx, tiers.WatchOptions{}) }()
	go func() { defer w.done.Done(); w.fd.Run(w.ctx) }()
	go func() { defer w.done.Done(); _ = srv.Serve(ln) }()
	context.AfterFunc(w.ctx, func() { srv.Close() })
}

// routedKey names what a pass routes (tier → servers), to count changes.
func routedKey(rep tiers.Report) string {
	var parts []string
	for tier, ss := range rep.Live {
		for _, s := range ss {
			parts = append(parts, tier+"="+s.Addr)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// accessLog keeps the front door's access lines for a failed test.
type accessLog struct {
	w     *frontWorld
	mu    sync.Mutex
	lines []string
}

func (a *accessLog) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lines = append(a.lines, strings.TrimRight(string(p), "\n"))
	if len(a.lines) > 5000 {
		a.lines = a.lines[len(a.lines)-5000:]
	}
	return len(p), nil
}

// close stops the controller and cancels the world's jobs, once (a
// benchmark closes a world before its next one; the cleanup then finds it
// closed).
func (w *frontWorld) close() { w.closed.Do(w.closeOnce) }

func (w *frontWorld) closeOnce() {
	if !w.shutdown(w.fastJob, w.fastJob+"-extra", w.reasJob, "vasp-"+w.id) {
		outs, _ := filepath.Glob(filepath.Join(w.dir, "*-*.out"))
		for _, f := range outs {
			b, _ := os.ReadFile(f)
			w.t.Logf("%s (last 2000 bytes):\n%s", filepath.Base(f), tail(b, 2000))
		}
		return
	}
	os.RemoveAll(w.dir)
}

// tier is the front door's status of one tier.
func (w *frontWorld) tier(name string) front.TierStatus {
	for _, ts := range w.fd.Status().Tiers {
		if ts.Tier == name {
			return ts
		}
	}
	return front.TierStatus{}
}

// up waits until both tiers are routed (the fast one with n heads) and the
// front door lists every model.
func (w *frontWorld) up(fastHeads int) {
	w.t.Helper()
	w.waitFor("both tiers routed by the front door", 120*time.Second, func() bool {
		return len(w.tier("fast").Heads) == fastHeads && len(w.tier("reasoning").Heads) == 1
	}, func() string { return string(w.fd.StatusJSON()) })
	w.waitFor("every model listed", 30*time.Second, func() bool {
		ms, _ := w.models()
		return len(ms) == 3
	})
}

// models is the front door's /v1/models: id → tier.
func (w *frontWorld) models() (map[string]string, error) {
	resp, err := http.Get(w.url + "/v1/models")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var doc struct {
		Data []struct {
			ID   string `json:"id"`
			Tier string `json:"tier"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range doc.Data {
		out[d.ID] = d.Tier
	}
	return out, nil
}

// result is one request through the front door (or nginx).
type result struct {
	status int
	tier   string
	body   string
	err    error
}

// chat posts one chat completion for model to base (stream: read as SSE
// to the end, [DONE] required); hdr adds headers.
func chat(c *http.Client, base, model string, stream bool, hdr ...string) result {
	return chatSaying(c, base, model, "hello", stream, hdr...)
}

// chatSaying is chat with msg as the user's message: distinct messages are
// distinct conversations, which the front door's affinity does not keep
// on one head.
func chatSaying(c *http.Client, base, model, msg string, stream bool, hdr ...string) result {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, model, stream, msg)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	r := result{status: resp.StatusCode, tier: resp.Header.Get(front.TierHeader)}
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		r.body, r.err = string(b), err
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		r.body += sc.Text() + "\n"
		done = done || sc.Text() == "data: [DONE]"
	}
	if r.err = sc.Err(); r.err == nil && !done {
		r.err = errors.New("stream ended without [DONE]")
	}
	return r
}

func (r result) ok() bool { return r.err == nil && r.status == http.StatusOK }

func (r result) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	return fmt.Sprintf("%d %s", r.status, strings.TrimSpace(r.body[:min(len(r.body), 300)]))
}

// TestE2EFrontRoutesByModel: one URL for both tiers; each model reaches
// the tier that serves it (the fast tier's router serves two), streams
// come whole, a model nobody serves is a 404 that lists the models.
func TestE2EFrontRoutesByModel(t *testing.T) {
	w := newFrontWorld(t, frontOpts{})
	w.up(1)
	ms, err := w.models()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"qwen-a": "fast", "qwen-b": "fast", "OR1-Behemoth": "reasoning"}
	for m, tier := range want {
		if ms[m] != tier {
			t.Errorf("/v1/models: %s served by %q, want %q (all: %v)", m, ms[m], tier, ms)
		}
	}
	c := &http.Client{Timeout: 30 * time.Second}
	for m, tier := range want {
		for _, stream := range []bool{false, true} {
			r := chat(c, w.url, m, stream)
			if !r.ok() || r.tier != tier || !strings.Contains(r.body, `"model":"`+m+`"`) {
				t.Errorf("%s (stream %v): %v, tier %q; want 200 from tier %s naming the model", m, stream, r, r.tier, tier)
			}
		}
	}
	if r := chat(c, w.url, "gpt-5", false); r.status != http.StatusNotFound || !strings.Contains(r.body, "OR1-Behemoth") {
		t.Errorf("unknown model: %v; want 404 listing the models", r)
	}
}

// rateLoad sends requests at a fixed rate, each on a new connection (as
// curl does), until ctx ends; it counts answers, failures, and the longest
// time a request took.
type rateLoad struct {
	sent, ok, failed atomic.Int64
	longest          atomic.Int64 // ns
	mu               sync.Mutex
	failures         []string
}

func startRateLoad(ctx context.Context, base, model string, perSecond int, hdr ...string) (*rateLoad, *sync.WaitGroup) {
	l := &rateLoad{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Add(1)
			l.sent.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
				start := time.Now()
				r := chat(c, base, model, false, hdr...)
				if d := int64(time.Since(start)); d > l.longest.Load() {
					l.longest.Store(d)
				}
				if r.ok() {
					l.ok.Add(1)
					return
				}
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.failures) < 20 {
					l.failures = append(l.failures, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), r))
				}
				l.mu.Unlock()
			}()
		}
	}()
	return l, &wg
}

// preemptFast submits a one-node science job on the fast tier's node
// (--exclusive: it takes the node) and returns its id.
func (w *frontWorld) preemptFast(node string, args ...string) string {
	w.t.Helper()
	argv := append([]string{"--parsable", "-p", "gpu_vasp", "-J", "vasp-" + w.id, "-N1", "--exclusive", "-w", node,
		"-o", "/dev/null", "-D", w.dir}, args...)
	out, err := exec.Command("sbatch", append(argv, "--wrap", "exec sleep 1000")...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("sbatch %v: %v %s", argv, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestE2EFrontHoldsThroughAPartialPreemption: 20 requests/s for the fast
// tier through the front door, each on a new connection; a science job
// takes the fast tier's node while another node is free; the tier comes
// back there (requeue, release, start, load) and every request is
// answered: the gap is a wait, not an error.
func TestE2EFrontHoldsThroughAPartialPreemption(t *testing.T) {
	w := newFrontWorld(t, frontOpts{})
	w.up(1)
	node := w.tier("fast").Heads[0].Node
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	l, wg := startRateLoad(ctx, w.url, "qwen-a", 20)
	time.Sleep(2 * time.Second)
	w.preemptFast(node)
	w.waitFor("the fast tier routed on another node", 120*time.Second, func() bool {
		hs := w.tier("fast").Heads
		return len(hs) == 1 && hs[0].Node != node
	}, func() string { return string(w.fd.StatusJSON()) })
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	t.Logf("%d requests at 20/s through a partial preemption (fast tier %s → %s): %d answered, %d failed; longest %.2f s",
		l.sent.Load(), node, w.tier("fast").Heads[0].Node, l.ok.Load(), l.failed.Load(), time.Duration(l.longest.Load()).Seconds())
	if l.failed.Load() > 0 {
		t.Errorf("%d requests failed; first: %v", l.failed.Load(), l.failures)
	}
	if time.Duration(l.longest.Load()) < time.Second {
		t.Errorf("no request waited a second: the preemption was not crossed (longest %v)", time.Duration(l.longest.Load()))
	}
}

// TestE2EFrontHoldTimesOut: while the reasoning tier loads (20 s), a
// request that may wait 1 s gets the tier's 503 once that second is over
// (reason: loading), and one with the tier's own hold is answered once the
// model is loaded.
func TestE2EFrontHoldTimesOut(t *testing.T) {
	w := newFrontWorld(t, frontOpts{reasoningLoad: 20 * time.Second})
	w.waitFor("the reasoning tier starting", 120*time.Second, func() bool {
		return w.tier("reasoning").View.Reason == tiers.ReasonStarting
	}, func() string { return string(w.fd.StatusJSON()) })
	c := &http.Client{Timeout: 2 * time.Minute}
	start := time.Now()
	r := chat(c, w.url, "OR1-Behemoth", false, front.HoldHeader, "1s")
	took := time.Since(start)
	var body struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal([]byte(r.body), &body)
	if r.status != http.StatusServiceUnavailable || body.Reason != tiers.ReasonStarting || took < time.Second {
		t.Errorf("held 1 s while loading: %v after %v; want the 503 (reason %q) after the second", r, took, tiers.ReasonStarting)
	}
	start = time.Now()
	if r := chat(c, w.url, "OR1-Behemoth", true); !r.ok() || r.tier != "reasoning" {
		t.Errorf("held with the tier's hold (60 s): %v; want the stream once loaded", r)
	}
	t.Logf("a 1 s hold ended in its 503 after %.2f s; a 60 s hold was answered after %.1f s", took.Seconds(), time.Since(start).Seconds())
}

// TestE2EFrontRetriesARefusedConnection: two replicas of the fast tier;
// one's supervisor is frozen and its head killed, so its endpoint file
// still says ready while its port refuses. Every request is answered (by
// the other replica), none gets the refusal.
func TestE2EFrontRetriesARefusedConnection(t *testing.T) {
	w := newFrontWorld(t, frontOpts{fastReplicas: 2})
	w.up(2)
	victim := w.tier("fast").Heads[0]
	sup := w.supervisorPID(victim.File)
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(sup, syscall.SIGCONT)
	host, _, _ := net.SplitHostPort(victim.Addr)
	for _, pid := range pidsOf("fake-llama server --host " + host + " ") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	w.waitFor("the victim's port refusing", 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", victim.Addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	c := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < 20; i++ {
		// Twenty conversations: one conversation's turns would all go to
		// the head that answered its first (affinity), never to the other.
		if r := chatSaying(c, w.url, "qwen-b", fmt.Sprint("hello ", i), false); !r.ok() {
			t.Fatalf("request %d with one replica refusing: %v", i, r)
		}
	}
	if st := w.tier("fast"); len(st.Heads) != 2 {
		t.Fatalf("the frozen replica is no longer routed (%+v): the test did not cross a refusal", st.Heads)
	}
	if n := countMetric(t, w.fd, "llm_front_retries_total"); n < 1 {
		t.Errorf("retries counted: %v, want at least 1 (the refused head was skipped after it refused)", n)
	}
}

// supervisorPID is the pid of the supervisor that wrote file (its
// endpoint file says so).
func (w *frontWorld) supervisorPID(file string) int {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "endpoints", file))
	if err != nil {
		w.t.Fatal(err)
	}
	e, err := endpoints.Parse(b)
	if err != nil {
		w.t.Fatal(err)
	}
	return e.PID
}

// countMetric sums a counter family of the front door's metrics.
func countMetric(t testing.TB, fd *front.Server, name string) float64 {
	t.Helper()
	mfs, err := fd.Metrics().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestE2EFrontKeepAliveThroughRoutingChanges: 32 clients on kept-alive
// connections (each reusing its connection without checking it, pausing
// 100 ms between requests) send fast-tier requests through the front door
// while the reasoning tier is routed and unrouted again and again (its
// head restarted by killing it: the supervisor restarts it, the endpoint
// goes starting, then ready). No client meets an error, and none has to
// connect again: routing changes touch no client connection.
func TestE2EFrontKeepAliveThroughRoutingChanges(t *testing.T) {
	w := newFrontWorld(t, frontOpts{})
	w.up(1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	body := `{"model":"qwen-a","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	l, wg := startRawKeepAlive(ctx, strings.TrimPrefix(w.url, "http://"), "/v1/chat/completions", body, 32, 100*time.Millisecond)
	before := w.routings.Load()
	host, _, _ := net.SplitHostPort(w.tier("reasoning").Heads[0].Addr)
	const cycles = 8
	for i := 0; i < cycles; i++ {
		for _, pid := range pidsOf("fake-llama server --host " + host + " ") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		w.waitFor("the reasoning tier unrouted", 30*time.Second, func() bool { return len(w.tier("reasoning").Heads) == 0 })
		w.waitFor("the reasoning tier routed again", 60*time.Second, func() bool { return len(w.tier("reasoning").Heads) == 1 })
	}
	stop()
	wg.Wait()
	changes := w.routings.Load() - before
	t.Logf("32 kept-alive clients over %d routing changes: %d requests answered, %d failed", changes, l.ok.Load(), l.failed.Load())
	if l.failed.Load() > 0 || l.conns.Load() != 32 {
		t.Errorf("%d requests failed (first: %v), %d connections opened by 32 clients", l.failed.Load(), l.first, l.conns.Load())
	}
	if changes < 2*cycles {
		t.Errorf("%d routing changes, want at least %d", changes, 2*cycles)
	}
}
