//go:build e2e

package front_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
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
	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/usage"
)

// doorWorld is the front door as its users meet it: `llm-upstreams front`
// as a process (built here) with who-uses-it wired from its config
// ([front.auth], [front.usage], [front.fair_share]), over fake llama.cpp
// heads on loopback whose endpoint files are written by hand (no Slurm:
// the scheduler check is off). The programs are built into a directory
// every user may read, so that users made with useradd can run
// `llm-upstreams key`. Needs root (endpoint files owned by root).
type doorWorld struct {
	t                         testing.TB
	dir, bin, fake, endpoints string
}

func newDoorWorld(t testing.TB) *doorWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (endpoint files owned by root)")
	}
	dir, err := os.MkdirTemp("", "front-door-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := &doorWorld{t: t, dir: dir, endpoints: filepath.Join(dir, "endpoints"), bin: filepath.Join(dir, "llm-upstreams")}
	if err := os.MkdirAll(w.endpoints, 0o755); err != nil {
		t.Fatal(err)
	}
	if w.fake, err = faketest.Build(dir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", w.bin, "slurm-llm/cmd/llm-upstreams").CombinedOutput(); err != nil {
		t.Fatalf("build llm-upstreams: %v\n%s", err, out)
	}
	return w
}

// spawn runs argv in its own process group until the test ends (killed
// then, with its group; and if the test process dies first, by
// Pdeathsig: a child left behind would hold the e2e lock's descriptor
// that flock passed down); env adds to the environment.
func (w *doorWorld) spawn(argv []string, out io.Writer, env ...string) *exec.Cmd {
	w.t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// head starts a fake llama-server serving model on a free loopback port
// and returns the port and the process (not yet published).
func (w *doorWorld) head(model string, flags ...string) (int, *exec.Cmd) {
	w.t.Helper()
	port := faketest.FreePort(w.t)
	cmd := w.spawn(append([]string{w.fake, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-m", model}, flags...), io.Discard)
	waitUp(w.t, fmt.Sprintf("http://127.0.0.1:%d/health", port))
	return port, cmd
}

// publish writes the endpoint file of a ready head of tier fast serving
// model at 127.0.0.1:port as job id.
func (w *doorWorld) publish(job string, port int, model string) {
	w.t.Helper()
	now := time.Now().UTC()
	e := endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: job, Host: "127.0.0.1",
		Port: port, State: endpoints.StateReady, Models: []string{model}, Node: "node1", PID: os.Getpid(),
		StartedAt: now, Heartbeat: now, LeaseExpires: now.Add(time.Hour)}
	if err := endpoints.Write(w.endpoints, e); err != nil {
		w.t.Fatal(err)
	}
}

// config writes NAME.toml: the front door listening on listen, its
// state_dir (the keys file and the usage database) NAME-state, its access
// log NAME-access.log, and extra (TOML tables: [front.auth] …) after.
func (w *doorWorld) config(name, listen, extra string) string {
	w.t.Helper()
	state := filepath.Join(w.dir, name+"-state")
	for _, d := range []string{filepath.Join(w.dir, "out"), state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			w.t.Fatal(err)
		}
	}
	body := fmt.Sprintf(`endpoint_dir = %q
output_dir = "%[2]s/out"
lock_file = "%[2]s/lock"
state_dir = %[3]q
keeper_config = ""
allowed_owners = ["0"]
allowed_networks = ["127.0.0.0/8"]
[tiers.fast]
[tiers.reasoning]
[nginx]
test = ["true"]
reload = ["true"]
[scheduler]
check = false
[front]
listen = %[4]q
access_log = "%[2]s/%[5]s-access.log"
%[6]s`, w.endpoints, w.dir, state, listen, name, extra)
	path := filepath.Join(w.dir, name+".toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// front starts `llm-upstreams front --config cfg` and waits until url
// lists the heads' models; env adds to its environment. Its log is shown
// when the test fails.
func (w *doorWorld) front(cfg, url string, env ...string) *exec.Cmd {
	w.t.Helper()
	var out faketest.Buffer
	w.t.Cleanup(func() {
		if w.t.Failed() {
			w.t.Logf("%s's log:\n%s", filepath.Base(cfg), out.String())
		}
	})
	cmd := w.spawn([]string{w.bin, "front", "--config", cfg, "--log-level", "warn"}, &out, env...)
	waitUp(w.t, url+"/v1/models")
	return cmd
}

// stop ends the front door with SIGTERM (its usage records and access
// lines written) and waits for it.
func (w *doorWorld) stop(cmd *exec.Cmd) {
	w.t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		w.t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		w.t.Errorf("the front door's exit: %v", err)
	}
}

// staticKeys writes a static keys file with a key for each user (account
// acct-USER) and returns its path and the keys by user.
func (w *doorWorld) staticKeys(users ...string) (string, map[string]string) {
	w.t.Helper()
	keys := map[string]string{}
	var lines strings.Builder
	for _, u := range users {
		key, _, _, err := access.NewKey(rand.Reader)
		if err != nil {
			w.t.Fatal(err)
		}
		keys[u] = key
		fmt.Fprintf(&lines, "%s acct-%s %s\n", u, u, key)
	}
	path := filepath.Join(w.dir, "static-keys")
	if err := os.WriteFile(path, []byte(lines.String()), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path, keys
}

// usage is `llm-upstreams usage --json --by user` over the last hour, by
// user.
func (w *doorWorld) usage(cfg string) (map[string]usage.Row, usage.Report) {
	w.t.Helper()
	rep := w.usageBy(cfg, "user")
	rows := map[string]usage.Row{}
	for _, r := range rep.Rows {
		rows[r.User] = r
	}
	return rows, rep
}

// usageBy is `llm-upstreams usage --json --by by` over the last hour.
func (w *doorWorld) usageBy(cfg, by string) usage.Report {
	w.t.Helper()
	out, err := exec.Command(w.bin, "usage", "--config", cfg, "--since", "1h", "--by", by, "--json").Output()
	if err != nil {
		w.t.Fatalf("llm-upstreams usage --by %s: %v", by, err)
	}
	var rep usage.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		w.t.Fatalf("llm-upstreams usage --by %s --json: %v\n%s", by, err, out)
	}
	return rep
}

// accessLines are the front door's access lines for chat completions
// so far (the key endpoint's left out).
func (w *doorWorld) accessLines(name string) []string {
	b, _ := os.ReadFile(filepath.Join(w.dir, name+"-access.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `path="/v1/chat/completions"`) {
			out = append(out, l)
		}
	}
	return out
}

// waitAccess waits until the access log has n chat lines and returns the
// nth (the front door writes them off the request path).
func (w *doorWorld) waitAccess(name string, n int) string {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ls := w.accessLines(name); len(ls) >= n {
			return ls[n-1]
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the access log never had %d chat lines: %q", n, w.accessLines(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitUp polls url until it answers 200.
func waitUp(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200 (%v)", url, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// post sends body to url+path with hdr (name, value pairs) and returns the
// status and the whole answer.
func post(url, path, body string, hdr ...string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), err
}
