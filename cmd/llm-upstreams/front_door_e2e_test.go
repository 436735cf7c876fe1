//go:build e2e

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/front"
	"slurm-llm/endpoints/nginx/nginxtest"
)

// A world for the front door's edges (issue 27) as a user meets them: the
// real `llm-upstreams front` process (and `llm-upstreams watch` with a
// private real nginx running the shipped site, where nginx is involved),
// the fake llama.cpp as heads, real clients (curl, the official OpenAI
// Node SDK) on loopback. Endpoint files are written by hand and Slurm is
// not asked ([scheduler] check off), so that a test can put a tier in
// exactly the state it needs: a file that says ready while its head still
// loads, a file that is refused. The reasoning tier's [front.tiers]
// settings (prefix, models) are the shipped etc/upstreams.toml's.
type doorWorld struct {
	t         testing.TB
	dir       string
	bin, fake string // llm-upstreams and fake-llama, built
	eps       string // endpoint_dir
	cfg       string // upstreams.toml
	url       string // the front door, http://127.0.0.1:PORT
	metrics   string // its metrics listener, http://127.0.0.1:PORT
	access    string // its access log (a file)
	log       faketest.Buffer
	nginx     *nginxtest.Nginx
	frontPort int
}

// doorOpts shape a doorWorld: more [front] keys (TOML lines), and
// whether nginx runs (the shipped site, reloaded by watch).
type doorOpts struct {
	front string
	nginx bool
}

func newDoorWorld(t testing.TB, o doorOpts) *doorWorld {
	t.Helper()
	w := &doorWorld{t: t, dir: t.TempDir(), frontPort: freePort(t)}
	w.eps = filepath.Join(w.dir, "endpoints")
	w.access = filepath.Join(w.dir, "access.log")
	w.url = fmt.Sprintf("http://127.0.0.1:%d", w.frontPort)
	if err := os.MkdirAll(w.eps, 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.fake, err = faketest.Build(w.dir); err != nil {
		t.Fatal(err)
	}
	w.bin = filepath.Join(w.dir, "llm-upstreams")
	if out, err := exec.Command("go", "build", "-o", w.bin, "slurm-llm/cmd/llm-upstreams").CombinedOutput(); err != nil {
		t.Fatalf("build llm-upstreams: %v\n%s", err, out)
	}
	out, test, reload := filepath.Join(w.dir, "out"), `["true"]`, `["true"]`
	if o.nginx {
		w.nginx = nginxtest.Start(t, filepath.Join("..", "..", "etc", "nginx", "slurm-llm.conf"), 1)
		q := func(argv []string) string { b, _ := json.Marshal(argv); return string(b) }
		out, test, reload = w.nginx.Out, q(w.nginx.TestArgv()), q(w.nginx.ReloadArgv())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	reasoning := shippedFrontTier(t, "reasoning")
	mport := freePort(t)
	w.metrics = fmt.Sprintf("http://127.0.0.1:%d", mport)
	w.cfg = filepath.Join(w.dir, "upstreams.toml")
	cfg := fmt.Sprintf(`endpoint_dir = %[1]q
output_dir = %[2]q
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
metrics_listen = "127.0.0.1:%[7]d"
access_log = %[8]q
fail_timeout = "1s"
models_refresh = "1s"
%[9]s
[front.tiers.reasoning]
prefix = %[10]q
models = %[11]s
`, w.eps, out, w.dir, test, reload, w.frontPort, mport, w.access, o.front, reasoning.Prefix, quoteList(reasoning.Models))
	if err := os.WriteFile(w.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// shippedFrontTier is tier's [front.tiers] settings in the shipped
// etc/upstreams.toml.
func shippedFrontTier(t testing.TB, tier string) front.TierConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "etc", "upstreams.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// The service account need not exist where the tests run.
	b = bytes.Replace(b, []byte(`allowed_owners = ["slurm-llm"]`), []byte(`allowed_owners = ["0"]`), 1)
	c, err := config.Parse("etc/upstreams.toml", b)
	if err != nil {
		t.Fatal(err)
	}
	return c.Front.Tiers[tier]
}

func quoteList(ss []string) string {
	b, _ := json.Marshal(ss)
	if ss == nil {
		return "[]"
	}
	return string(b)
}

// proc runs argv in its own process group until the test ends (killed by
// its group's id), its output to out. Pdeathsig kills it too if the test
// binary dies first (a timeout's panic runs no cleanup): an orphan would
// keep the e2e lock's descriptor, inherited through flock, open for ever.
func (w *doorWorld) proc(out io.Writer, argv ...string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// head starts a fake llama-server serving model (as --alias names it) on a
// free port and writes its endpoint file, ready, for tier and job: the
// file says ready at once, whatever the head is doing (flags such as
// --fake-load-time make it load first). It returns the head's port.
func (w *doorWorld) head(tier, job, model string, flags ...string) int {
	w.t.Helper()
	port := freePort(w.t)
	w.proc(io.Discard, append([]string{w.fake, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--alias", model}, flags...)...)
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: tier, JobID: job, Host: "127.0.0.1", Port: port,
		State: endpoints.StateReady, Models: []string{model}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(w.eps, e); err != nil {
		w.t.Fatal(err)
	}
	return port
}

// headStatus is the status of a head's /health (0: it does not answer).
func headStatus(port int) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ready waits until a head's /health is 200.
func (w *doorWorld) ready(port int) {
	w.t.Helper()
	w.waitFor(fmt.Sprintf("the head on :%d ready", port), 30*time.Second, func() bool { return headStatus(port) == http.StatusOK })
}

// front starts `llm-upstreams front` and waits until it serves.
func (w *doorWorld) front() {
	w.t.Helper()
	w.proc(&w.log, w.bin, "front", "--config", w.cfg, "--log-level", "info")
	w.waitFor("the front door serving", 30*time.Second, func() bool {
		resp, err := http.Get(w.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// watch starts `llm-upstreams watch` (it renders nginx's upstream files and
// its 503 files, and reloads nginx).
func (w *doorWorld) watch() {
	w.t.Helper()
	w.proc(&w.log, w.bin, "watch", "--config", w.cfg, "--log-level", "info")
}

// models waits until the front door's /v1/models lists every one of ids.
func (w *doorWorld) models(ids ...string) {
	w.t.Helper()
	w.waitFor(fmt.Sprintf("the front door listing %v", ids), 30*time.Second, func() bool {
		_, _, body, err := curl(w.url + "/v1/models")
		for _, id := range ids {
			if err != nil || !strings.Contains(body, `"id":"`+id+`"`) {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond every 50 ms until it holds or d passes; the front
// door's log goes with the failure.
func (w *doorWorld) waitFor(what string, d time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("gave up waiting %v for %s; the front door's and watch's log:\n%s", d, what, tail([]byte(w.log.String()), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// accessLines waits until the access log has n lines for path (as the
// log quotes it) and returns them.
func (w *doorWorld) accessLines(path string, n int) []string {
	w.t.Helper()
	var lines []string
	w.waitFor(fmt.Sprintf("%d access lines for %s", n, path), 30*time.Second, func() bool {
		b, _ := os.ReadFile(w.access)
		lines = nil
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, " path="+strconv.Quote(path)+" ") {
				lines = append(lines, l)
			}
		}
		return len(lines) >= n
	})
	return lines
}

// metric sums the samples of a family in the front door's /metrics whose
// labels include every one of labels (`when="mid_answer"`).
func (w *doorWorld) metric(name string, labels ...string) float64 {
	w.t.Helper()
	_, _, body, err := curl(w.metrics + "/metrics")
	if err != nil {
		w.t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			sum += v
		}
	}
	return sum
}

// curl runs curl (-sS, the answer's header block to one file and its body
// to another) with args and returns the status and header of the final
// answer (after any 1xx), its body, and curl's error (with its stderr).
func curl(args ...string) (int, http.Header, string, error) {
	dir, err := os.MkdirTemp("", "curl-")
	if err != nil {
		return 0, nil, "", err
	}
	defer os.RemoveAll(dir)
	hdrFile, bodyFile := filepath.Join(dir, "h"), filepath.Join(dir, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", append([]string{"-sS", "-D", hdrFile, "-o", bodyFile}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	body, _ := os.ReadFile(bodyFile)
	raw, _ := os.ReadFile(hdrFile)
	if runErr != nil {
		runErr = fmt.Errorf("curl %v: %w: %s", args, runErr, strings.TrimSpace(stderr.String()))
	}
	// The last block is the final answer's (a 100 Continue comes first).
	blocks := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(raw), "\r\n", "\n")), "\n\n")
	last := blocks[len(blocks)-1]
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(strings.ReplaceAll(last, "\n", "\r\n")+"\r\n\r\n")), nil)
	if err != nil {
		return 0, nil, string(body), errors.Join(runErr, fmt.Errorf("curl's header block %q: %w", last, err))
	}
	return resp.StatusCode, resp.Header, string(body), runErr
}

// post is curl's POST of a JSON body to url, with more curl arguments.
func post(url, body string, more ...string) (int, http.Header, string, error) {
	return curl(append([]string{"-H", "Content-Type: application/json", "--data-binary", body, url}, more...)...)
}
