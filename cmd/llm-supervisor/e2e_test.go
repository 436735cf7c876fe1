//go:build e2e

package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/slurm/slurmtest"
)

// e2eTier is a distributed tier run by the real llm-supervisor under real
// Slurm (scripts/slurm-cluster.sh up): head on node1, workers on node2 and
// node3, all fake-llama. Everything lives in dir, whose random name is the
// marker that finds leftover processes.
type e2eTier struct {
	dir, endpointDir, jobOut string
	headPort, workerPort     int
	jobID                    string
	nodes                    []string // sbatch -N and -w
	// cluster is the local cluster; headHost is where the head (on node1)
	// is reached from here: 127.0.0.1, or node1's Ethernet address.
	cluster    slurmtest.Cluster
	headHost   string
	sbatchArgs []string
}

func TestE2EDistributedTier(t *testing.T) {
	tr := setupE2E(t)
	tr.submit(t)
	tr.waitState(t, endpoints.StateReady, 90*time.Second)
	tr.complete(t)

	step := tr.stepID(t, "e2e-rpc-node2")
	t.Logf("cancelling worker step %s", step)
	if out, err := exec.Command("scancel", step).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v %s", step, err, out)
	}
	e2eWaitFor(t, "the tier to recover by itself", 60*time.Second, func() bool {
		return strings.Count(tr.log(), "to=ready") >= 2 && tr.state() == endpoints.StateReady
	})
	tr.complete(t)

	if out, err := exec.Command("scancel", tr.jobID).CombinedOutput(); err != nil {
		t.Fatalf("scancel %s: %v %s", tr.jobID, err, out)
	}
	e2eWaitFor(t, "the endpoint file to go", 60*time.Second, func() bool { return tr.state() == "" })
	e2eWaitFor(t, "every fake process to end", 60*time.Second, func() bool { return len(tr.leftovers()) == 0 })
	t.Logf("supervisor log:\n%s", tr.log())
}

// e2eOptions vary the tier: head arguments added to the fake's (TOML
// strings, e.g. `"--fake-load-time", "20s"`) and TOML sections appended
// to the config.
type e2eOptions struct {
	headArgs []string
	extra    string
	// single: a single tier (the head alone) on node1, with extra giving
	// its [restart] section.
	single bool
	// replace rewrites the config ("min_workers = 2" → "min_workers = 1").
	replace []string
	// sbatchArgs are added to the job's submission ("--no-kill").
	sbatchArgs []string
	// real runs real llama.cpp instead of the fake (e2e_real_test.go).
	real *realLlama
}

// setupE2E builds the binaries into a fresh world-readable temp dir and
// writes the tier config and the batch script.
func setupE2E(t testing.TB) *e2eTier { return setupE2EWith(t, e2eOptions{}) }

// setupE2EWith is setupE2E with options.
func setupE2EWith(t testing.TB, o e2eOptions) *e2eTier {
	cluster := slurmtest.Need(t, "")
	b := make([]byte, 6)
	rand.Read(b)
	dir := filepath.Join(os.TempDir(), "slurm-llm-e2e-sup-"+hex.EncodeToString(b))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := &e2eTier{dir: dir, endpointDir: filepath.Join(dir, "endpoints"), jobOut: filepath.Join(dir, "job.out"),
		nodes: []string{"-N3", "-w", "node[1-3]"}, cluster: cluster, headHost: cluster.Addr("node1")}
	os.MkdirAll(tr.endpointDir, 0o755)
	e2eBuild(t, filepath.Join(dir, "llm-supervisor"), "slurm-llm/cmd/llm-supervisor")
	e2eBuild(t, filepath.Join(dir, "fake-llama"), "slurm-llm/cmd/fake-llama")
	tr.headPort = faketest.FreePort(t)
	workerPort := e2eFreePortPair(t)
	tr.workerPort = workerPort
	head := ""
	for _, a := range o.headArgs {
		head += fmt.Sprintf(", %q", a)
	}
	config := fmt.Sprintf(e2eConfig, tr.endpointDir, dir, dir, head, tr.headPort, dir, workerPort)
	if o.single {
		config = fmt.Sprintf(e2eSingleConfig, tr.endpointDir, dir, dir, head, tr.headPort)
		tr.nodes = []string{"-N1", "-w", "node1"}
	}
	if cluster.Mode == "netns" {
		config = asSite(config)
	}
	if o.real != nil {
		config = o.real.apply(config, dir)
	}
	config = strings.NewReplacer(o.replace...).Replace(config)
	tr.sbatchArgs = o.sbatchArgs
	e2eWriteFile(t, filepath.Join(dir, "tier.toml"), config+o.extra)
	e2eWriteFile(t, filepath.Join(dir, "job.sh"), fmt.Sprintf("#!/bin/bash\nexec %s/llm-supervisor run --config %s/tier.toml --log-level debug\n", dir, dir))
	t.Cleanup(func() { tr.cleanup(t) })
	return tr
}

const e2eSingleConfig = `
tier = "e2e"
kind = "single"
endpoint_dir = %q
log_dir = "%s/logs"
node_address = "slurm"

[head]
command = ["%s/fake-llama", "server", "--host", "{addr}", "--port", "{port}",
           "-m", "/models/e2e.gguf", "--metrics", "--fake-load-time", "300ms"%s]
port = %d

[timeouts]
load = "60s"
health_interval = "500ms"
stop_grace = "3s"
heartbeat = "1s"
lease = "10s"
`

const e2eConfig = `
tier = "e2e"
kind = "distributed"
endpoint_dir = %q
log_dir = "%s/logs"
node_address = "slurm"
min_workers = 2

[head]
command = ["%s/fake-llama", "server", "--host", "{addr}", "--port", "{port}", "--rpc", "{rpc}",
           "-m", "/models/e2e.gguf", "--metrics", "--fake-load-time", "300ms"%s]
port = %d

[worker]
command = ["%s/fake-llama", "rpc-server", "--host", "{addr}", "--port", "{port}"]
port = %d
port_step = 1

[timeouts]
worker_start = "30s"
load = "60s"
health_interval = "500ms"
stop_grace = "3s"
heartbeat = "1s"
lease = "10s"

[restart]
initial_backoff = "20ms"
max_backoff = "100ms"
max_failures = 1000     # the benchmark kills a worker again and again
`

// asSite turns a loopback tier config into the site's shape, for the
// cluster with real addresses: workers bind and the head reaches them at
// the nodes' IPoIB names (resolved to addresses on the batch node), the
// head listens on every interface and is published under its node's name
// (Ethernet), and every node has its own addresses, so no port_step.
func asSite(config string) string {
	r := strings.NewReplacer(
		`node_address = "slurm"`, "node_address = \"{node}-ib\"\nendpoint_host = \"{node}\"",
		`"server", "--host", "{addr}"`, `"server", "--host", "0.0.0.0"`,
		"port_step = 1", "port_step = 0")
	return r.Replace(config)
}

func e2eBuild(t testing.TB, out, pkg string) {
	t.Helper()
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
}

func e2eWriteFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// e2eFreePortPair returns p such that p and p+1 were free (the two workers
// share 127.0.0.1 and use port_step 1).
func e2eFreePortPair(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		p := faketest.FreePort(t)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// submit sbatches the tier on the three nodes and waits until it runs.
func (tr *e2eTier) submit(t testing.TB) {
	args := append([]string{"--parsable"}, tr.nodes...)
	args = append(args, tr.sbatchArgs...)
	args = append(args, "-p", "gpu_ai", "--job-name=e2e-supervisor",
		"--requeue", "--open-mode=append", "--output="+tr.jobOut, filepath.Join(tr.dir, "job.sh"))
	out, err := exec.Command("sbatch", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v %s", err, out)
	}
	tr.jobID = strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Logf("job %s, dir %s", tr.jobID, tr.dir)
}

// cleanup cancels the job and kills, by PID, any process left under dir.
func (tr *e2eTier) cleanup(t testing.TB) {
	if tr.jobID != "" {
		exec.Command("scancel", tr.jobID).Run()
	}
	deadline := time.Now().Add(45 * time.Second)
	for len(tr.leftovers()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	for _, pid := range tr.leftovers() {
		t.Errorf("process %d left behind; killing it", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if t.Failed() {
		t.Logf("supervisor log:\n%s", tr.log())
	} else if os.Getenv("E2E_KEEP") == "" {
		os.RemoveAll(tr.dir)
	}
}

// leftovers lists the processes whose command line names dir.
func (tr *e2eTier) leftovers() []int { return pgrepPIDs(tr.dir) }

// pgrepPIDs lists the processes whose command line matches pattern
// (pgrep -f), this test process left out.
func pgrepPIDs(pattern string) []int {
	out, _ := exec.Command("pgrep", "-f", pattern).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (tr *e2eTier) log() string {
	b, _ := os.ReadFile(tr.jobOut)
	return string(b)
}

// state is the endpoint file's state, "" when there is none.
func (tr *e2eTier) state() endpoints.State {
	b, err := os.ReadFile(filepath.Join(tr.endpointDir, endpoints.FileName("e2e", tr.jobID)))
	if err != nil {
		return ""
	}
	e, err := endpoints.Parse(b)
	if err != nil {
		return ""
	}
	return e.State
}

func (tr *e2eTier) waitState(t testing.TB, want endpoints.State, d time.Duration) {
	t.Helper()
	e2eWaitFor(t, "endpoint "+string(want), d, func() bool { return tr.state() == want })
}

// complete asks the tier for a chat completion.
func (tr *e2eTier) complete(t testing.TB) {
	t.Helper()
	// A few tokens, whatever the head's --fake-tokens (a tier started for
	// long streams still answers a check quickly), and a deadline.
	body := `{"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Post(fmt.Sprintf("http://%s/v1/chat/completions", net.JoinHostPort(tr.headHost, strconv.Itoa(tr.headPort))), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var reply struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &reply) != nil || len(reply.Choices) == 0 {
		t.Fatalf("completion: %d %s", resp.StatusCode, b)
	}
}

// stepID finds the step named name in the job (squeue -s).
func (tr *e2eTier) stepID(t testing.TB, name string) string {
	t.Helper()
	out, err := exec.Command("squeue", "-h", "-s", "-j", tr.jobID, "-o", "%i %j").Output()
	if err != nil {
		t.Fatalf("squeue -s: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == name {
			return f[0]
		}
	}
	t.Fatalf("no step %s in:\n%s", name, out)
	return ""
}

// waitFor polls cond until it holds or d passes.
func e2eWaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkE2EWorkerKillDetect kills a worker's fake rpc-server (the task
// under srun and the shim) with SIGKILL, b.N times, and reports the median
// time until the supervisor logged the exit, and until the tier was ready again.
func BenchmarkE2EWorkerKillDetect(b *testing.B) {
	tr := setupE2E(b)
	tr.submit(b)
	tr.waitState(b, endpoints.StateReady, 90*time.Second)
	var detect, recover []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pid := tr.workerPID(b)
		const exited, ready = "process exited: job=", "to=ready"
		exits, readies := strings.Count(tr.log(), exited), strings.Count(tr.log(), ready)
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		e2eWaitFor(b, "the exit in the log", 30*time.Second, func() bool { return strings.Count(tr.log(), exited) > exits })
		detect = append(detect, tr.nthLineTime(b, exited, exits).Sub(killed))
		e2eWaitFor(b, "ready again", 60*time.Second, func() bool { return strings.Count(tr.log(), ready) > readies })
		recover = append(recover, tr.nthLineTime(b, ready, readies).Sub(killed))
	}
	b.StopTimer()
	b.ReportMetric(medianMS(detect), "ms-detect")
	b.ReportMetric(medianMS(recover), "ms-ready-again")
}

// workerPID finds a worker's fake rpc-server (port workerPort): the
// process whose command line starts with the fake's path (not srun's nor
// the shim's). On the loopback cluster that is node2's; with real
// addresses every worker has that port, and the lowest PID is taken.
func (tr *e2eTier) workerPID(t testing.TB) int {
	t.Helper()
	pattern := fmt.Sprintf("^%s/fake-llama rpc-server .*--port %d$", tr.dir, tr.workerPort)
	var pid int
	e2eWaitFor(t, "a worker process", 30*time.Second, func() bool {
		if pids := pgrepPIDs(pattern); len(pids) > 0 {
			pid = slices.Min(pids)
		}
		return pid > 0
	})
	return pid
}

// e2eWaitPID waits for exactly one process whose command line matches
// pattern (pgrep -f) and returns its PID.
func e2eWaitPID(t testing.TB, what, pattern string) int {
	t.Helper()
	var pid int
	e2eWaitFor(t, what, 30*time.Second, func() bool {
		pids := pgrepPIDs(pattern)
		if len(pids) != 1 {
			return false
		}
		pid = pids[0]
		return pid > 0
	})
	return pid
}

// nthLineTime returns the timestamp of the log line after the first n that contain s.
func (tr *e2eTier) nthLineTime(t testing.TB, s string, n int) time.Time {
	t.Helper()
	return logLineTime(t, tr.log(), s, n)
}

// logLine is the line of log after the first n that hold s.
func logLine(t testing.TB, log, s string, n int) string {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		if n == 0 {
			return line
		}
		n--
	}
	t.Fatalf("no line %d with %q", n, s)
	return ""
}

// logLineTime is the timestamp of logLine.
func logLineTime(t testing.TB, log, s string, n int) time.Time {
	t.Helper()
	line := logLine(t, log, s, n)
	ts, err := time.Parse("2006-01-02T15:04:05.000Z07:00", strings.Fields(line)[0])
	if err != nil {
		t.Fatalf("log line %q: %v", line, err)
	}
	return ts
}

// afterOf is the after= duration of logLine.
func afterOf(t testing.TB, log, s string, n int) time.Duration {
	t.Helper()
	line := logLine(t, log, s, n)
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "after="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			return d
		}
	}
	t.Fatalf("no after= in %q", line)
	return 0
}

func medianMS(ds []time.Duration) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}

// ctldLog is slurmctld's log on the test cluster (scripts/slurm-cluster.sh).
const ctldLog = "/var/log/slurm/slurmctld.log"

// ctldLine is the time of the first line of slurmctld's log, stamped at or
// after since, that holds s not followed by a digit ("JobId=17" is not
// "JobId=170"). The log outlives clusters, and job ids start again with
// each mode's state: an older line can name the same job.
func ctldLine(s string, since time.Time) time.Time {
	f, err := os.Open(ctldLog)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	since = since.Truncate(time.Millisecond)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, s)
		if i < 0 || len(line) < 25 || line[0] != '[' {
			continue
		}
		if rest := line[i+len(s):]; rest != "" && rest[0] >= '0' && rest[0] <= '9' {
			continue
		}
		ts, err := time.ParseInLocation("2006-01-02T15:04:05.000", line[1:24], time.Local)
		if err == nil && !ts.Before(since) {
			return ts
		}
	}
	return time.Time{}
}
