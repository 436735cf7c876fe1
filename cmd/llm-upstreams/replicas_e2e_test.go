//go:build e2e

package main

import (
	"context"
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
	"testing"
	"time"

	"slurm-llm/endpoints/tiers"
	"slurm-llm/slurm"
	"slurm-llm/slurm/slurmtest"
)

// The fast tier with replicas on the namespace cluster (each node its own
// address, so every replica has the same port): the real llm-supervisor
// running the fake llama.cpp (2 slots, 20 tokens at 20 tokens/s: a
// request takes 1 s of a slot), kept queued and scaled by an in-process
// keeper (its loop: scale check every second), routed by an in-process
// llm-upstreams watch (nginx replaced by `true`: the routed servers are
// read from watch's reports). Load is sent to the routed servers, fewest
// of the generator's own requests first, as nginx's least_conn would.

type replicaWorld struct {
	*e2eController
	jobName string
	closed  sync.Once

	mu      sync.Mutex
	servers []string // routed servers of tier fast, last pass
}

func newReplicaWorld(t testing.TB, maxReplicas, slots int) *replicaWorld {
	t.Helper()
	slurmtest.Need(t, "netns")
	e, id := newE2EController(t, "replicas")
	w := &replicaWorld{e2eController: e, jobName: "llm-rep-" + id}
	w.write("tier.toml", fakeTier(w.dir, freePort(t), "--parallel", strconv.Itoa(slots), "--fake-tokens", "20", "--fake-token-rate", "20"))
	w.write("job.sh", fmt.Sprintf("#!/bin/bash\nexec %s/llm-supervisor run --config %s/tier.toml\n", w.dir, w.dir))
	w.write("keeper.toml", fmt.Sprintf(`state_dir = "%[1]s/keeper"
endpoint_dir = "%[1]s/endpoints"
scale_interval = "1s"
[tiers.fast]
job_name = %[2]q
script = "%[1]s/job.sh"
# --exclusive: the cluster has no GPUs to count, so one replica per node
# is asked for as a whole node.
sbatch_args = ["-p", "gpu_ai", "-N1", "--exclusive", "--requeue", "--open-mode=append", "-o", "%[1]s/job-%%j.out", "-D", %[1]q]
backoff_initial = "1h"
backoff_max = "1h"
max_submits_per_hour = 20
[tiers.fast.replicas]
min = 1
max = %[3]d
in_flight_per_replica = 2
grow_after = "1s"
idle_after = "5s"
start_timeout = "20s"
`, w.dir, w.jobName, maxReplicas))
	w.write("upstreams.toml", fmt.Sprintf(`endpoint_dir = "%[1]s/endpoints"
output_dir = "%[1]s/out"
lock_file = "%[1]s/lock"
state_dir = "%[1]s/state"
allowed_owners = ["0"]
allowed_networks = ["10.77.0.0/16"]
[tiers.fast]
job_name = %[2]q
[nginx]
test = ["true"]
reload = ["true"]
`, w.dir, w.jobName))
	w.start(tbWriter{t: t}, func(rep tiers.Report, _ time.Time) {
		for _, tr := range rep.Tiers {
			if tr.Tier == "fast" && tr.ServedBy == "fast" {
				w.setServers(tr.Servers)
			} else if tr.Tier == "fast" {
				w.setServers(nil)
			}
		}
	})
	t.Cleanup(w.close)
	return w
}

func (w *replicaWorld) setServers(s []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.servers = slices.Clone(s)
}

func (w *replicaWorld) routed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.servers)
}

// close stops the keeper and watch, then cancels the test's jobs and waits
// until they are gone; once (a benchmark closes each world before its next
// one, and the cleanup then finds it closed).
func (w *replicaWorld) close() { w.closed.Do(w.closeOnce) }

func (w *replicaWorld) closeOnce() {
	if !w.shutdown(w.jobName, w.jobName+"-extra", "vasp-"+w.jobName) {
		outs, _ := filepath.Glob(filepath.Join(w.dir, "job-*.out"))
		for _, f := range outs {
			b, _ := os.ReadFile(f)
			w.t.Logf("%s (last 2000 bytes):\n%s", filepath.Base(f), tail(b, 2000))
		}
		return
	}
	os.RemoveAll(w.dir)
}

func (w *replicaWorld) jobs(name string) []slurm.QueuedJob { return w.queue(name) }

// waitFor is the controller's, with the routed servers and the extras in
// its failure.
func (w *replicaWorld) waitFor(what string, d time.Duration, cond func() bool) time.Time {
	w.t.Helper()
	return w.e2eController.waitFor(what, d, cond, func() string {
		return fmt.Sprintf("(routed %v, extras %v)", w.routed(), w.jobs(w.jobName+"-extra"))
	})
}

// load sends n concurrent request loops to the routed servers until ctx
// ends; it counts completions, tokens and failures.
type load struct {
	done, failed, tokens atomic.Int64
	mu                   sync.Mutex
	outstanding          map[string]int
	lastErr              atomic.Value
}

func (w *replicaWorld) startLoad(ctx context.Context, n int) (*load, *sync.WaitGroup) {
	l := &load{outstanding: map[string]int{}}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				srv := l.pick(w.routed())
				if srv == "" {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				ok, toks, err := complete(client, srv)
				l.release(srv)
				switch {
				case ok:
					l.done.Add(1)
					l.tokens.Add(int64(toks))
				case ctx.Err() == nil:
					l.failed.Add(1)
					l.lastErr.Store(fmt.Sprintf("%s: %v", srv, err))
				}
			}
		}()
	}
	return l, &wg
}

// pick is the routed server with the fewest of this load's requests.
func (l *load) pick(servers []string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	best := ""
	for _, s := range servers {
		if best == "" || l.outstanding[s] < l.outstanding[best] {
			best = s
		}
	}
	if best != "" {
		l.outstanding[best]++
	}
	return best
}

func (l *load) release(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outstanding[s]--
}

// complete posts one completion and returns whether it came back whole
// and how many tokens it held.
func complete(c *http.Client, server string) (bool, int, error) {
	resp, err := c.Post("http://"+server+"/completion", "application/json", strings.NewReader(`{"prompt":"hello","n_predict":20}`))
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, 0, fmt.Errorf("status %d, %v: %.200s", resp.StatusCode, err, b)
	}
	return true, strings.Count(string(b), "tok"), nil
}

// grown waits, once a load of 6 has started, until a second and a third
// replica are routed, and returns how long each took from the call.
func (w *replicaWorld) grown() (second, third time.Duration) {
	w.t.Helper()
	start := time.Now()
	s := w.waitFor("a second replica routed", 60*time.Second, func() bool { return len(w.routed()) >= 2 })
	th := w.waitFor("a third replica routed", 60*time.Second, func() bool { return len(w.routed()) == 3 })
	return s.Sub(start), th.Sub(start)
}

// shrunk stops the load and returns how long after its last request the
// tier was back to its kept replica alone (no extra listed).
func (w *replicaWorld) shrunk(stopLoad func(), wg *sync.WaitGroup) time.Duration {
	w.t.Helper()
	stopLoad()
	wg.Wait()
	end := time.Now()
	back := w.waitFor("back to the kept replica alone", 90*time.Second, func() bool {
		return len(w.routed()) == 1 && len(w.jobs(w.jobName+"-extra")) == 0
	})
	return back.Sub(end)
}

// BenchmarkE2EReplicasReaction: the fast tier (max 3, grow_after 1 s,
// idle_after 5 s, the fake's load 0.3 s) under a load of 6: load starts →
// second and third replica routed; load stops → back to min.
func BenchmarkE2EReplicasReaction(b *testing.B) {
	for i := 0; i < b.N; i++ {
		w := newReplicaWorld(b, 3, 2)
		w.waitFor("the kept replica routed", 90*time.Second, func() bool { return len(w.routed()) == 1 })
		ctx, stopLoad := context.WithCancel(context.Background())
		l, wg := w.startLoad(ctx, 6)
		second, third := w.grown()
		back := w.shrunk(stopLoad, wg)
		if f := l.failed.Load(); f > 0 {
			b.Errorf("%d requests failed (last: %v)", f, l.lastErr.Load())
		}
		w.close()
		b.ReportMetric(second.Seconds(), "second-routed-s")
		b.ReportMetric(third.Seconds(), "third-routed-s")
		b.ReportMetric(back.Seconds(), "back-to-min-s")
		b.Logf("load → 2nd routed %.1f s, 3rd %.1f s; load stopped → back to min %.1f s (idle_after 5 s)",
			second.Seconds(), third.Seconds(), back.Seconds())
	}
}

// TestE2EReplicasGrowGiveWayAndShrink: under load the tier grows from one
// replica onto the idle nodes, one extra at a time, each its own job; a
// science job taking one extra's node ends that replica (its supervisor
// requeues it, so the node frees at once, and the keeper cancels it: it
// never runs again) while the others serve on without a failed request;
// when the load stops the extras drain and end after idle_after, and the
// kept replica stays.
func TestE2EReplicasGrowGiveWayAndShrink(t *testing.T) {
	w := newReplicaWorld(t, 3, 2)
	w.waitFor("the kept replica running and routed", 90*time.Second, func() bool { return len(w.routed()) == 1 })
	kept := w.jobs(w.jobName)
	if len(kept) != 1 {
		t.Fatalf("kept jobs %v, want 1", kept)
	}

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	l, wg := w.startLoad(ctx, 6)
	second, third := w.grown()
	t.Logf("load started → 2nd replica routed %.1fs, 3rd %.1fs (grow_after 1s, fake load 0.3s)", second.Seconds(), third.Seconds())
	extras := w.jobs(w.jobName + "-extra")
	if len(extras) != 2 {
		t.Fatalf("extra jobs %+v, want 2", extras)
	}
	nodes := map[string]bool{kept[0].NodeList: true}
	for _, e := range extras {
		info, err := w.c.ShowJob(context.Background(), e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Requeue {
			t.Errorf("extra %s is not requeueable, want --requeue (the keeper cancels it once requeued)", e.ID)
		}
		nodes[e.NodeList] = true
	}
	if len(nodes) != 3 {
		t.Errorf("replicas on nodes %v, want three different nodes", nodes)
	}
	time.Sleep(3 * time.Second) // stays at max: no fourth submit
	if n := len(w.jobs(w.jobName + "-extra")); n != 2 {
		t.Errorf("%d extras at max 3, want 2", n)
	}

	// Science takes one extra's node: that replica is requeued, then
	// cancelled by the keeper: gone.
	victim := extras[0]
	before := l.failed.Load()
	out, err := exec.Command("sbatch", "--parsable", "-p", "gpu_vasp", "-J", "vasp-"+w.jobName, "-w", victim.NodeList,
		"-o", "/dev/null", "-D", w.dir, "--wrap", "exec sleep 1000").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch science: %v %s", err, out)
	}
	science := strings.TrimSpace(string(out))
	w.waitFor("the science job running", 60*time.Second, func() bool {
		js := w.jobs("vasp-" + w.jobName)
		return len(js) == 1 && js[0].State == slurm.JobRunning
	})
	w.waitFor("two replicas routed", 30*time.Second, func() bool { return len(w.routed()) == 2 })
	w.waitFor("the preempted extra gone (requeued, then cancelled by the keeper)", 30*time.Second, func() bool {
		for _, e := range w.jobs(w.jobName + "-extra") {
			if e.ID == victim.ID {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // the others serve on
	if f := l.failed.Load() - before; f > 0 {
		t.Errorf("%d requests failed around the preemption (last: %v)", f, l.lastErr.Load())
	}
	_ = exec.Command("scancel", science).Run()

	// Load stops: the extras end after idle_after; the kept one stays.
	back := w.shrunk(stopLoad, wg)
	t.Logf("load stopped → back to min %.1fs (idle_after 5s); %d requests done, %d failed (last: %v)",
		back.Seconds(), l.done.Load(), l.failed.Load(), l.lastErr.Load())
	if js := w.jobs(w.jobName); len(js) != 1 || js[0].ID != kept[0].ID || js[0].State != slurm.JobRunning {
		t.Errorf("kept replica after shrinking: %+v, want job %s still running", js, kept[0].ID)
	}
}

// tbWriter logs through a test or a benchmark.
type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// BenchmarkE2EReplicasThroughput: 12 concurrent completions (the fake
// llama: 4 slots per replica, 20 tokens at 20 tokens/s per slot) against
// the fast tier with max = 1, then max = 3 replicas on the 3-node cluster:
// tokens/s once the tier has grown (20 s window), and how long a science
// job needing all 3 nodes takes from sbatch to RUNNING with that many
// replicas up.
func BenchmarkE2EReplicasThroughput(b *testing.B) {
	rate := map[int]float64{}
	for _, maxR := range []int{1, 3} {
		tps, science := replicaThroughput(b, maxR)
		rate[maxR] = tps
		b.ReportMetric(tps, fmt.Sprintf("tokens/s(max=%d)", maxR))
		b.ReportMetric(science.Seconds(), fmt.Sprintf("science-start-s(max=%d)", maxR))
		b.Logf("max = %d: %.1f tokens/s; a 3-node science job started %.2f s after its sbatch", maxR, tps, science.Seconds())
	}
	b.ReportMetric(rate[3]/rate[1], "speedup")
	b.Logf("max = 3 vs max = 1: %.2f×", rate[3]/rate[1])
}

func replicaThroughput(b *testing.B, maxR int) (float64, time.Duration) {
	w := newReplicaWorld(b, maxR, 4)
	defer w.close()
	w.waitFor("the kept replica routed", 90*time.Second, func() bool { return len(w.routed()) == 1 })
	ctx, stopLoad := context.WithCancel(context.Background())
	l, wg := w.startLoad(ctx, 12)
	if maxR > 1 {
		w.waitFor("max replicas routed", 90*time.Second, func() bool { return len(w.routed()) == maxR })
	}
	time.Sleep(3 * time.Second) // every loop on a replica
	t0, n0 := time.Now(), l.tokens.Load()
	time.Sleep(20 * time.Second)
	tps := float64(l.tokens.Load()-n0) / time.Since(t0).Seconds()
	stopLoad()
	wg.Wait()
	if f := l.failed.Load(); f > 0 {
		b.Errorf("max %d: %d requests failed (last: %v)", maxR, f, l.lastErr.Load())
	}
	sub := time.Now()
	out, err := exec.Command("sbatch", "--parsable", "-p", "gpu_vasp", "-J", "vasp-"+w.jobName, "-N3", "--exclusive",
		"-o", "/dev/null", "-D", w.dir, "--wrap", "exec sleep 1000").CombinedOutput()
	if err != nil {
		b.Fatalf("sbatch science: %v %s", err, out)
	}
	started := w.waitFor("the 3-node science job running", 120*time.Second, func() bool {
		js := w.jobs("vasp-" + w.jobName)
		return len(js) == 1 && js[0].State == slurm.JobRunning
	})
	_ = exec.Command("scancel", strings.TrimSpace(string(out))).Run()
	return tps, started.Sub(sub)
}
