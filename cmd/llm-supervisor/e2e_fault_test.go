//go:build e2e

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/slurm"
	"slurm-llm/slurm/slurmtest"
)

// The faults of a real cluster, on the cluster with real addresses
// (scripts/slurm-cluster.sh up --netns): a node lost (power off: its
// processes killed, its links gone) and a link cut (a dead switch port:
// processes live, traffic silently dropped). What was seen is written in
// supervisor/FACTS.md ("Faults").

// moduleRoot is the module's root, from this package's directory.
const moduleRoot = "../.."

// faultTier is a distributed tier for fault tests: quick to notice a stall
// and to give up on a worker that does not come back.
func faultTier(t *testing.T, minWorkers int, headArgs ...string) *e2eTier {
	slurmtest.Need(t, "netns")
	return setupE2EWith(t, e2eOptions{headArgs: headArgs, replace: faultReplace(minWorkers, "5s")})
}

// faultReplace is the fault tests' config: min_workers, a worker that
// does not come back given up on quickly, stall (empty: its default), and
// the product's restart pacing, not the benchmarks' 20 ms: right after a
// lost node returns, srun could not create a step on it for a moment
// ("Requested node configuration is not available", seen once), and three
// starts in 120 ms gave up.
func faultReplace(minWorkers int, stall string) []string {
	start := `worker_start = "8s"`
	if stall != "" {
		start += "\nstall = " + strconv.Quote(stall)
	}
	return []string{
		"min_workers = 2", "min_workers = " + strconv.Itoa(minWorkers),
		`worker_start = "30s"`, start,
		`initial_backoff = "20ms"`, `initial_backoff = "1s"`,
		`max_backoff = "100ms"`, `max_backoff = "4s"`,
	}
}

// returnNode brings a lost node back, at the end of the test whatever happened.
func returnNode(t *testing.T, c slurmtest.Cluster, node string) {
	t.Cleanup(func() { c.Fault(t, moduleRoot, "node-return", node) })
}

// readEndpoint reads the tier's endpoint file; ok is false when it is
// absent or unreadable.
func (tr *e2eTier) readEndpoint() (endpoints.Endpoint, bool) {
	b, err := os.ReadFile(filepath.Join(tr.endpointDir, endpoints.FileName("e2e", tr.jobID)))
	if err != nil {
		return endpoints.Endpoint{}, false
	}
	e, err := endpoints.Parse(b)
	return e, err == nil
}

// jobInfo is scontrol's view of the tier's job.
func (tr *e2eTier) jobInfo(t *testing.T) slurm.JobInfo {
	t.Helper()
	info, err := (&slurm.Client{}).ShowJob(context.Background(), tr.jobID)
	if err != nil {
		t.Fatalf("show job: %v", err)
	}
	return info
}

// A node lost (power off) ends the job's allocation in Slurm: with or
// without min_workers room, Slurm requeues the job once it marks the node
// DOWN (SlurmdTimeout; 24-31 s here), the supervisor on a surviving batch
// node drains and exits, and the job runs again once the node is back. No
// process of the first run is left. (A classic tier does not serve on
// fewer nodes through a node loss; an elastic tier does.) A run that finds
// the returned node unusable (scripts/FACTS-cluster.md N6) and has no
// min_workers room requeues itself for a fresh allocation (waitReady).
func TestE2ENodeLost(t *testing.T) {
	tests := []struct {
		name       string
		node       string
		minWorkers int
	}{
		{name: "a worker's node, with min_workers room", node: "node3", minWorkers: 1},
		{name: "a worker's node, without room", node: "node3", minWorkers: 2},
		{name: "the head's node (the batch node)", node: "node1", minWorkers: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := faultTier(t, tt.minWorkers)
			tr.submit(t)
			tr.waitReady(t, 0, 90*time.Second)
			first := tr.leftovers()
			before := tr.jobInfo(t).Restarts
			returnNode(t, tr.cluster, tt.node)
			lost := time.Now()
			tr.cluster.Fault(t, moduleRoot, "node-lose", tt.node)
			e2eWaitFor(t, "the job requeued", 120*time.Second, func() bool { return tr.jobInfo(t).Restarts > before })
			t.Logf("requeued %s after the node was lost; the supervisor saw:\n%s", time.Since(lost).Round(time.Second),
				grepLines(tr.log(), "dropped", "down", "requeue", "stop notice", "run ending", "gave up", "giving up"))
			e2eWaitFor(t, "the first run's processes gone", 90*time.Second, func() bool { return !anyAlive(first) })
			tr.cluster.Fault(t, moduleRoot, "node-return", tt.node)
			releaseWhenSafe(t, tr.jobID)
			tr.waitReady(t, before+1, 240*time.Second)
			tr.complete(t)
		})
	}
}

// A worker's node that the job's allocation cannot use from its start (its
// IPoIB link cut: the node answers nothing, while Slurm sees it up) and no
// min_workers room: the supervisor gives up on it after
// worker_start_failures starts and, the tier never ready in this run,
// requeues the job for a fresh allocation rather than ending it
// (FACTS-cluster N6). Released once the link is back, the job serves.
func TestE2EUnusableNodeRequeues(t *testing.T) {
	tr := faultTier(t, 2)
	t.Cleanup(func() { tr.cluster.Fault(t, moduleRoot, "link-restore", "node3", "ib") })
	tr.cluster.Fault(t, moduleRoot, "link-cut", "node3", "ib")
	tr.submit(t)
	e2eWaitFor(t, "the job requeued by its supervisor", 120*time.Second, func() bool {
		return strings.Contains(tr.log(), selfRequeued) && tr.jobInfo(t).Restarts == 1
	})
	t.Logf("the supervisor saw:\n%s", grepLines(tr.log(), "gave up", "requeue"))
	tr.cluster.Fault(t, moduleRoot, "link-restore", "node3", "ib")
	releaseWhenSafe(t, tr.jobID)
	tr.waitReady(t, 1, 120*time.Second)
	tr.complete(t)
}

// selfRequeued is what the supervisor logs when it requeues its job
// because a node of the allocation could not be used.
const selfRequeued = "requeueing the job for a fresh allocation"

// waitReady waits until a run of the job restarted at least restarts times
// serves. A run may find a node of its allocation unusable: Slurm refused
// steps on a node that had just returned (FACTS-cluster N6), or the node
// answered nothing for ~24 s because the batch node still held the lost
// node's old MAC address. Without min_workers room the supervisor then
// requeues the job, and the test releases it as the keeper would.
func (tr *e2eTier) waitReady(t *testing.T, restarts int, d time.Duration) {
	t.Helper()
	seen := strings.Count(tr.log(), selfRequeued)
	self := 0
	e2eWaitFor(t, fmt.Sprintf("the tier ready in a run with restart count %d or more", restarts), d, func() bool {
		log := tr.log()
		if strings.Contains(log, "not requeueing the job") {
			t.Fatalf("the job gave up requeueing itself:\n%s", grepLines(log, "gave up", "requeueing"))
		}
		if n := strings.Count(log, selfRequeued) - seen; n > self {
			self = n
			t.Logf("the job requeued itself (%d):\n%s", n, grepLines(log, "gave up", selfRequeued))
			releaseWhenSafe(t, tr.jobID)
		}
		e, ok := tr.readEndpoint()
		return ok && e.State == endpoints.StateReady && e.RestartCount >= restarts+self
	})
}

// grepLines is the lines of log that hold any of words.
func grepLines(log string, words ...string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// anyAlive reports whether any of pids still runs.
func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			return true
		}
	}
	return false
}

// The IPoIB link between the head and one worker cut while both live, a
// stream in flight: the head blocks on the silent worker (llama.cpp's RPC
// has no timeout; /health stays 200). The supervisor sees the head's data
// to the worker retransmitted and never acknowledged (the kernel's
// tcp_info), or else requests in flight without progress for
// timeouts.stall; it kills the head, restarts the workers, cannot reach
// the cut one, drops it and serves on two nodes.
func TestE2ELinkCut(t *testing.T) {
	tr := faultTier(t, 1, "--fake-tokens", "100000", "--fake-token-rate", "20")
	tr.submit(t)
	tr.waitState(t, endpoints.StateReady, 90*time.Second)
	tr.startStream(t) // in flight when the link is cut; cut off with the hung head
	t.Cleanup(func() { tr.cluster.Fault(t, moduleRoot, "link-restore", "node3", "ib") })
	cut := time.Now()
	tr.cluster.Fault(t, moduleRoot, "link-cut", "node3", "ib")
	e2eWaitFor(t, "the hung head found", 60*time.Second, func() bool {
		return strings.Contains(tr.log(), "a worker's link is silent") || strings.Contains(tr.log(), "head hung")
	})
	t.Logf("hung head found %s after the cut", time.Since(cut).Round(100*time.Millisecond))
	e2eWaitFor(t, "the tier ready on two nodes", 120*time.Second, func() bool {
		return strings.Contains(tr.log(), "worker dropped") && tr.state() == endpoints.StateReady
	})
	t.Logf("serving on two nodes %s after the cut", time.Since(cut).Round(100*time.Millisecond))
	tr.complete(t)
}

// releaseWhenSafe makes a requeued job eligible at once, by Slurm's safe
// rule (PENDING, past the second of its requeue: slurm/FACTS.md).
func releaseWhenSafe(t testing.TB, job string) {
	t.Helper()
	e2eWaitFor(t, "job "+job+" pending", 120*time.Second, func() bool {
		out, _ := exec.Command("squeue", "-h", "-j", job, "-o", "%T").Output()
		return strings.TrimSpace(string(out)) == "PENDING"
	})
	out, err := exec.Command("squeue", "-h", "-j", job, "-o", "%V").Output()
	submitted, perr := time.ParseInLocation("2006-01-02T15:04:05", strings.TrimSpace(string(out)), time.Local)
	if err != nil || perr != nil {
		t.Fatalf("submit time of %s: %v %v", job, err, perr)
	}
	e2eWaitFor(t, "a second after the requeue", 5*time.Second, func() bool { return time.Now().After(submitted.Add(time.Second)) })
	if out, err := exec.Command("scontrol", "update", "JobId="+job, "StartTime=now").CombinedOutput(); err != nil {
		t.Logf("release %s: %v %s (Slurm may have started it already)", job, err, out)
	}
}

// TestE2ESilentLinkNothingInFlight: the IPoIB link between the head and
// one worker is cut with nothing in flight (both processes alive), and a
// completion is sent during the cut. It hung 121.6 s with real llama.cpp,
// until timeouts.stall (kept at its 2 min default here). Now the head's
// data to the worker, retransmitted and never acknowledged, shows the
// silent link in seconds: the head and its workers restart, the cut
// worker is dropped, and the tier serves on two nodes (issue 21, item 6).
func TestE2ESilentLinkNothingInFlight(t *testing.T) {
	slurmtest.Need(t, "netns")
	tr := setupE2EWith(t, e2eOptions{replace: faultReplace(1, "")}) // stall at its 2 min default
	tr.submit(t)
	tr.waitState(t, endpoints.StateReady, 90*time.Second)
	t.Cleanup(func() { tr.cluster.Fault(t, moduleRoot, "link-restore", "node3", "ib") })
	tr.cluster.Fault(t, moduleRoot, "link-cut", "node3", "ib")
	sent := time.Now()
	ended := make(chan string, 1)
	go func() {
		body := `{"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
		client := &http.Client{Timeout: 150 * time.Second}
		resp, err := client.Post(fmt.Sprintf("http://%s/v1/chat/completions", net.JoinHostPort(tr.headHost, strconv.Itoa(tr.headPort))),
			"application/json", strings.NewReader(body))
		if err != nil {
			ended <- err.Error()
			return
		}
		resp.Body.Close()
		ended <- resp.Status
	}()
	e2eWaitFor(t, "the silent link found (not after timeouts.stall's 2 min)", 30*time.Second, func() bool {
		return strings.Contains(tr.log(), "a worker's link is silent")
	})
	found := time.Since(sent)
	select {
	case how := <-ended:
		t.Logf("silent link found %s after the request was sent; the request ended after %s: %s",
			found.Round(100*time.Millisecond), time.Since(sent).Round(100*time.Millisecond), how)
	case <-time.After(30 * time.Second):
		t.Errorf("the request sent during the cut was still open 30 s after the head was restarted")
	}
	e2eWaitFor(t, "the tier ready on two nodes", 120*time.Second, func() bool {
		return strings.Contains(tr.log(), "worker dropped") && tr.state() == endpoints.StateReady
	})
	t.Logf("serving on two nodes %s after the request", time.Since(sent).Round(100*time.Millisecond))
	tr.complete(t)
}
