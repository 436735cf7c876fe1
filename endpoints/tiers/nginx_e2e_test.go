//go:build e2e

package tiers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/nginx"
	"slurm-llm/endpoints/nginx/nginxtest"
	. "slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
)

// privateNginx is an nginx started for one test from the shipped site
// config, on free loopback ports, with its own prefix, pid and temp dirs.
type privateNginx struct {
	*nginxtest.Nginx
	endpoints string
}

// startNginx starts a private nginx with the shipped site (nginxtest) and
// an endpoint directory beside it.
func startNginx(t testing.TB) *privateNginx {
	t.Helper()
	n := &privateNginx{Nginx: nginxtest.Start(t, filepath.Join("..", "..", "etc", "nginx", "slurm-llm.conf"), 1),
		endpoints: filepath.Join(t.TempDir(), "endpoints")}
	if err := os.MkdirAll(n.endpoints, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// config is an llm-upstreams config driving this nginx.
func (n *privateNginx) config(t testing.TB) config.Config {
	t.Helper()
	q := func(argv ...string) string {
		b, _ := json.Marshal(argv)
		return string(b)
	}
	cfg, err := config.Parse("e2e.toml", []byte(fmt.Sprintf(`
endpoint_dir = %q
output_dir = %q
lock_file = %q
sweep_interval = "1h"
allowed_owners = ["0"]
allowed_networks = ["127.0.0.0/8"]
[tiers.fast]
[tiers.reasoning]
backup = "fast"
[nginx]
test = %s
reload = %s
[scheduler]
check = false
`, n.endpoints, n.Out, filepath.Join(n.Prefix, "lock"),
		q(n.TestArgv()...), q(n.ReloadArgv()...))))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// watcher is the watcher over cfg: the core's passes with its nginx
// consumer, as llm-upstreams sync and watch wire them.
func watcher(cfg config.Config, opts Options) *Updater {
	opts.Consumers = append(opts.Consumers, nginx.NewSite(cfg.Nginx, "llm-upstreams e2e", nil, opts.Log))
	return New(cfg.Watcher, opts)
}

// head is a stand-in for a tier's llama-server: it answers every request
// with its name, and streams a few SSE chunks on /v1/chat/completions.
// On /gated it sends one chunk and holds the rest until release is closed.
type head struct {
	name    string
	port    int
	release chan struct{}
}

func startHead(t testing.TB, name string) head {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"head\":%q,\"i\":%d}\n\n", name, i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	release := make(chan struct{})
	mux.HandleFunc("/gated", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return head{name: name, port: ln.Addr().(*net.TCPAddr).Port, release: release}
}

// publish writes a ready endpoint file for tier/job pointing at h.
func (n *privateNginx) publish(t testing.TB, tier, job string, h head) {
	t.Helper()
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: tier, JobID: job, Host: "127.0.0.1", Port: h.port,
		State: endpoints.StateReady, Models: []string{"tiny"}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(10 * time.Minute)}
	if err := endpoints.Write(n.endpoints, e); err != nil {
		t.Fatal(err)
	}
}

// reply is one response through nginx.
type reply struct {
	status            int
	body              string
	retryAfter, ctype string
	tier              string
}

func get(port int, path string) (reply, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After"),
		ctype: resp.Header.Get("Content-Type"), tier: resp.Header.Get("X-LLM-Tier")}, err
}

// waitReply polls GET port/path until cond holds; nginx reloads asynchronously.
func waitReply(t testing.TB, port int, path, what string, cond func(reply) bool) reply {
	t.Helper()
	var last reply
	waitUntil(t, what, func() bool {
		r, err := get(port, path)
		last = r
		return err == nil && cond(r)
	})
	return last
}

// waitUntil polls cond every 5 ms until it holds or 15 s pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

func isUnavailable(r reply) bool {
	var body struct {
		Error struct {
			Code int    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	return r.status == 503 && r.retryAfter != "" && strings.HasPrefix(r.ctype, "application/json") &&
		json.Unmarshal([]byte(r.body), &body) == nil && body.Error.Code == 503
}

func TestE2ESyncRoutesThenFallsBackTo503(t *testing.T) {
	n := startNginx(t)
	a := startHead(t, "head-a")
	u := watcher(n.config(t), Options{Log: hclog.NewNullLogger()})

	r := waitReply(t, n.Fast, "/v1/models", "fast answers 503 before any endpoint", isUnavailable)
	if r.tier != "none" {
		t.Errorf("X-LLM-Tier = %q, want none", r.tier)
	}
	n.publish(t, "fast", "101", a)
	if rep, err := u.Pass(context.Background()); err != nil || !rep.Reloaded {
		t.Fatalf("pass: reloaded %v, %v", rep.Reloaded, err)
	}
	waitReply(t, n.Fast, "/v1/models", "fast is answered by head-a", func(r reply) bool { return r.body == "head-a" })
	r = waitReply(t, n.Reasoning, "/v1/models", "reasoning is served by its backup", func(r reply) bool { return r.body == "head-a" })
	if r.tier != "fast" {
		t.Errorf("reasoning X-LLM-Tier = %q, want fast (backup)", r.tier)
	}
	r = waitReply(t, n.Fast, "/v1/chat/completions", "a stream passes through", func(r reply) bool { return r.status == 200 })
	if !strings.Contains(r.body, `"head":"head-a"`) || !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
		t.Errorf("stream through nginx = %q", r.body)
	}

	if err := endpoints.Remove(n.endpoints, "fast", "101"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatalf("pass: %v", err)
	}
	waitReply(t, n.Fast, "/v1/chat/completions", "fast answers 503 JSON with Retry-After", isUnavailable)
	waitReply(t, n.Reasoning, "/v1/models", "reasoning answers 503 JSON with Retry-After", isUnavailable)
}

// A head that died between passes (connection refused) gets the same 503
// JSON answer, never a 502.
func TestE2EDeadHeadGives503Not502(t *testing.T) {
	n := startNginx(t)
	u := watcher(n.config(t), Options{Log: hclog.NewNullLogger()})
	n.publish(t, "fast", "102", head{name: "dead", port: faketest.FreePort(t)})
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReply(t, n.Fast, "/v1/models", "a refused head gives 503 JSON", isUnavailable)
}

// A broken include makes nginx -t fail: the pass fails, the candidate files
// are rolled back and nginx keeps serving the last good config.
func TestE2EBrokenConfigKeepsServing(t *testing.T) {
	n := startNginx(t)
	a, b := startHead(t, "head-a"), startHead(t, "head-b")
	m := &Metrics{}
	u := watcher(n.config(t), Options{Log: hclog.NewNullLogger(), Metrics: m})
	n.publish(t, "fast", "103", a)
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReply(t, n.Fast, "/", "head-a serves", func(r reply) bool { return r.body == "head-a" })
	good := readDirFiles(n.Out)

	if err := os.WriteFile(filepath.Join(n.ExtraDir, "broken.conf"), []byte("this is not nginx {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.publish(t, "fast", "103", b)
	if _, err := u.Pass(context.Background()); !errors.Is(err, nginx.ErrTestFailed) {
		t.Fatalf("pass with a broken include = %v, want ErrTestFailed", err)
	}
	if got := readDirFiles(n.Out); fmt.Sprint(got) != fmt.Sprint(good) {
		t.Errorf("files after failed test differ from the last good ones")
	}
	for i := 0; i < 5; i++ {
		if r, err := get(n.Fast, "/"); err != nil || r.body != "head-a" {
			t.Fatalf("after failed test: %q, %v; want head-a still served", r.body, err)
		}
	}

	if err := os.Remove(filepath.Join(n.ExtraDir, "broken.conf")); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatalf("pass after repair: %v", err)
	}
	waitReply(t, n.Fast, "/", "head-b serves after repair", func(r reply) bool { return r.body == "head-b" })
}

// Watch mode routes a newly written file without any timer.
func TestE2EWatchServesNewFile(t *testing.T) {
	n := startNginx(t)
	a := startHead(t, "head-a")
	u := watcher(n.config(t), Options{Log: hclog.NewNullLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Watch(ctx, WatchOptions{}) }()
	t.Cleanup(func() { cancel(); <-done })

	n.publish(t, "reasoning", "104_2", a)
	r := waitReply(t, n.Reasoning, "/", "reasoning routed to head-a by watch", func(r reply) bool { return r.body == "head-a" })
	if r.tier != "reasoning" {
		t.Errorf("X-LLM-Tier = %q, want reasoning", r.tier)
	}
}

// BenchmarkE2EWatchFileToRoute measures, with real nginx, the time from an
// endpoint file being written to nginx routing to it: through watch mode,
// and through one sync pass started right away (the timer adds its wait,
// 0–30 s, mean 15 s, on top). Medians over 20 changes each.
func BenchmarkE2EWatchFileToRoute(b *testing.B) {
	n := startNginx(b)
	heads := []head{startHead(b, "head-a"), startHead(b, "head-b")}
	const samples = 20
	for i := 0; i < b.N; i++ {
		u := watcher(n.config(b), Options{Log: hclog.NewNullLogger()})
		syncMs := measureRoute(b, n, heads, samples, func() {
			if _, err := u.Pass(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- u.Watch(ctx, WatchOptions{}) }()
		watchMs := measureRoute(b, n, heads, samples, func() {})
		cancel()
		<-done
		b.ReportMetric(median(watchMs), "watch_median_ms")
		b.ReportMetric(maxOf(watchMs), "watch_max_ms")
		b.ReportMetric(median(syncMs), "sync_pass_median_ms")
	}
}

// measureRoute flips tier fast between the heads samples times, calling
// after() after each write, and returns how long each flip took to be routed.
func measureRoute(b *testing.B, n *privateNginx, heads []head, samples int, after func()) []float64 {
	var ms []float64
	for s := 0; s < samples; s++ {
		h := heads[s%2]
		start := time.Now()
		n.publish(b, "fast", "900", h)
		after()
		waitReply(b, n.Fast, "/", h.name+" routed", func(r reply) bool { return r.body == h.name })
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
	}
	return ms
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		if x > m {
			m = x
		}
	}
	return m
}

// A stream passes through nginx as the head produces it: the first chunk
// reaches the client while the head still holds the rest back. (Measured:
// nginx 1.22 forwards a flushed chunk at once even with proxy_buffering on,
// so this guards the whole path, not that one directive.)
func TestE2EStreamIsNotBuffered(t *testing.T) {
	n := startNginx(t)
	a := startHead(t, "head-a")
	u := watcher(n.config(t), Options{Log: hclog.NewNullLogger()})
	n.publish(t, "fast", "105", a)
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReply(t, n.Fast, "/", "head-a serves", func(r reply) bool { return r.body == "head-a" })
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/gated", n.Fast), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		k, _ := resp.Body.Read(buf)
		first <- string(buf[:k])
	}()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	select {
	case got := <-first:
		if !strings.Contains(got, "data: first") {
			t.Errorf("first read = %q", got)
		}
	case <-deadline.C:
		t.Fatalf("first chunk not delivered while the head held the stream: nginx buffers")
	}
	close(a.release)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("rest of stream = %q", rest)
	}
}

// post sends a chat completion (POST with a JSON body) through nginx.
func post(port int, path string) (reply, error) {
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", port, path), "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After"),
		ctype: resp.Header.Get("Content-Type"), tier: resp.Header.Get("X-LLM-Tier")}, err
}

// A tier with nothing live answers a POST with 503, a Retry-After from its
// estimate and a JSON body saying why and when it is expected back
// (Slurm's start estimate for its pending job + its measured start to
// routed). A new estimate reaches clients without an nginx reload.
// Regression: the body was fixed text and Retry-After always 30.
func TestE2EUnavailableSaysWhyAndWhen(t *testing.T) {
	n := startNginx(t)
	cfg := n.config(t)
	cfg.StateDir = t.TempDir()
	cfg.Scheduler.Check = false
	if err := SaveMem(cfg.StateDir, map[string]TierMem{"fast": {Ready: []float64{20}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	q := NewFakeQueue(slurm.QueuedJob{ID: "7", State: slurm.JobPending, Reason: "Resources", Priority: 1,
		UID: 0, Partition: "gpu_ai", Name: "llm-fast", Start: start})
	u := watcher(cfg, Options{Log: hclog.NewNullLogger(), Queue: q})
	if _, err := u.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantBack := start.Add(20 * time.Second).UTC().Format(time.RFC3339)
	var doc struct {
		Error        struct{ Code int }
		Reason       string  `json:"reason"`
		ExpectedBack *string `json:"expected_back"`
	}
	r := waitReplyWith(t, post, n.Fast, "/v1/chat/completions", "fast answers 503 with its estimate", func(r reply) bool {
		return isUnavailable(r) && json.Unmarshal([]byte(r.body), &doc) == nil && doc.ExpectedBack != nil &&
			*doc.ExpectedBack == wantBack && r.retryAfter == "600" // the reload is asynchronous
	})
	if doc.Reason != ReasonQueued || r.tier != "none" {
		t.Errorf("503: reason %q, Retry-After %q, X-LLM-Tier %q; want %q, 600, none\n%s", doc.Reason, r.retryAfter, r.tier, ReasonQueued, r.body)
	}
	later := start.Add(time.Minute)
	q.SetQueued(func(jobs []slurm.QueuedJob) { jobs[0].Start = later })
	u.ForgetTierAnswer() // ask again now
	rep, err := u.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Reloaded {
		t.Errorf("a new estimate in the same Retry-After bucket reloaded nginx")
	}
	wantBack = later.Add(20 * time.Second).UTC().Format(time.RFC3339)
	waitReplyWith(t, post, n.Fast, "/v1/chat/completions", "the new estimate is served", func(r reply) bool {
		return isUnavailable(r) && json.Unmarshal([]byte(r.body), &doc) == nil && doc.ExpectedBack != nil && *doc.ExpectedBack == wantBack
	})
}

// waitReplyWith polls send(port, path) until cond holds.
func waitReplyWith(t testing.TB, send func(int, string) (reply, error), port int, path, what string, cond func(reply) bool) reply {
	t.Helper()
	var last reply
	waitUntil(t, what, func() bool {
		r, err := send(port, path)
		last = r
		return err == nil && cond(r)
	})
	return last
}
