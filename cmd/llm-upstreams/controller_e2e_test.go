//go:build e2e

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/keeper"
	"slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
)

// e2eController is what the e2e worlds of this package share: a directory
// with the real llm-supervisor and fake-llama built into it, and the
// controller's two loops run in process against the real Slurm: the keeper
// (`keep --interval 30s`, with its release and scale checks) and
// llm-upstreams watch (whose reports go to a callback; nginx is whatever
// the world's upstreams.toml says). Build it with newE2EController, write
// keeper.toml and upstreams.toml, then start.
type e2eController struct {
	t    testing.TB
	dir  string
	c    *slurm.Client
	ctx  context.Context // the loops' context, until shutdown
	stop func()
	done sync.WaitGroup
}

// newE2EController makes <tmp>/slurm-llm-e2e-<kind>-<random> with the
// directories the worlds use and the binaries the jobs run; id is the
// random part, for unique job names.
func newE2EController(t testing.TB, kind string) (e *e2eController, id string) {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	id = hex.EncodeToString(b)
	e = &e2eController{t: t, dir: filepath.Join(os.TempDir(), "slurm-llm-e2e-"+kind+"-"+id), c: &slurm.Client{}, stop: func() {}}
	for _, d := range []string{"endpoints", "logs", "out", "state", "keeper"} {
		if err := os.MkdirAll(filepath.Join(e.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for bin, pkg := range map[string]string{"llm-supervisor": "slurm-llm/cmd/llm-supervisor", "fake-llama": "slurm-llm/cmd/fake-llama"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(e.dir, bin), pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return e, id
}

// write puts a file (executable: job scripts too) in the world's directory.
func (e *e2eController) write(name, body string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(body), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

// start loads keeper.toml and upstreams.toml from the directory and runs
// the keeper (logging to klog at Info) and watch until shutdown; every
// pass's report goes to onReport with its time.
func (e *e2eController) start(klog io.Writer, onReport func(tiers.Report, time.Time)) config.Config {
	e.t.Helper()
	kcfg, err := keeper.Load(filepath.Join(e.dir, "keeper.toml"))
	if err != nil {
		e.t.Fatal(err)
	}
	ucfg, err := config.Load(filepath.Join(e.dir, "upstreams.toml"))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.ctx, e.stop = ctx, cancel
	k := keeper.New(kcfg, keeper.Options{Log: hclog.New(&hclog.LoggerOptions{Name: "keeper", Output: klog, Level: hclog.Info})})
	passes := make(chan tiers.PassResult)
	u := tiers.New(ucfg.Watcher, tiers.Options{Log: hclog.NewNullLogger(), Scheduler: slurmJobs{c: e.c}, Queue: e.c})
	e.done.Add(3)
	go func() { defer e.done.Done(); _ = k.Run(ctx, keeper.RunOptions{Interval: 30 * time.Second}) }()
	go func() { defer e.done.Done(); _ = u.Watch(ctx, tiers.WatchOptions{Passed: passes}) }()
	go func() {
		defer e.done.Done()
		for {
			select {
			case p := <-passes:
				onReport(p.Report, time.Now())
			case <-ctx.Done():
				return
			}
		}
	}()
	return ucfg
}

// shutdown stops the keeper and watch, then cancels the jobs of names
// (scancel -n takes one name) until squeue lists none of them: a job
// caught in its requeue (COMPLETING: scancel does nothing) is pending a
// moment later, and ran again after Slurm's hold when cancelled once
// only. It reports whether the directory may go (the test passed): the
// caller logs what it needs first.
func (e *e2eController) shutdown(names ...string) bool {
	e.stop()
	e.done.Wait()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		for _, name := range names {
			_ = exec.Command("scancel", "-n", name).Run()
		}
		out, err := exec.Command("squeue", "-h", "-n", strings.Join(names, ",")).Output()
		if err == nil && len(bytes.TrimSpace(out)) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return !e.t.Failed()
}

// queue lists the jobs named name.
func (e *e2eController) queue(name string) []slurm.QueuedJob {
	e.t.Helper()
	js, err := e.c.Queue(context.Background(), slurm.QueueQuery{Names: []string{name}})
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

// waitFor polls cond every 50 ms until it holds or d passes; explain, if
// set, adds to the failure what the world looks like.
func (e *e2eController) waitFor(what string, d time.Duration, cond func() bool, explain ...func() string) time.Time {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			more := ""
			for _, f := range explain {
				more += " " + f()
			}
			e.t.Fatalf("gave up waiting %v for %s%s", d, what, more)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}

// fakeTier is the tier.toml of the worlds' jobs: a one-node tier of the
// fake llama.cpp (0.3 s load) under dir, its head on port, with extra
// head arguments.
func fakeTier(dir string, port int, headArgs ...string) string {
	argv := append([]string{dir + "/fake-llama", "server", "--host", "{addr}", "--port", "{port}",
		"-m", "/models/fast.gguf", "--metrics", "--fake-load-time", "300ms"}, headArgs...)
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`
tier = "fast"
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
`, dir, strings.Join(quoted, ", "), port)
}
