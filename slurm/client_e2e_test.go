//go:build e2e

package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"slurm-llm/slurm/slurmtest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests need the local cluster (scripts/slurm-cluster.sh up) and share
// it with other tests, so every wait polls against a generous deadline.

const e2eWait = 120 * time.Second

// submitSleeper submits a one-node job that records its environment in dir
// (env.N for the Nth run) and then runs body (default: sleep). It is cancelled
// when the test ends.
func submitSleeper(t *testing.T, c *Client, dir, body string, sbatchArgs ...string) string {
	t.Helper()
	if body == "" {
		body = "exec sleep 600"
	}
	script := filepath.Join(dir, "job.sh")
	text := "#!/bin/bash\nenv > \"" + dir + "/env.${SLURM_RESTART_COUNT:-0}\"\n" + body + "\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-N1", "-J", "slurm-e2e-" + t.Name(), "-o", "/dev/null", "-D", dir}, sbatchArgs...)
	id, err := c.Submit(context.Background(), script, args...)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Cancel(context.Background(), id); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return id
}

// waitFor polls cond every 200 ms until it is true or the deadline passes.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, e2eWait)
		}
		<-tick.C
	}
}

func waitState(t *testing.T, c *Client, id string, want JobState) {
	t.Helper()
	waitFor(t, fmt.Sprintf("job %s %s", id, want), func() (bool, error) {
		st, err := c.JobStates(context.Background(), []string{id})
		return st[id] == want, err
	})
}

func envFile(t *testing.T, path string) func(string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return func(k string) string { return env[k] }
}

func TestE2EJobLifecycle(t *testing.T) {
	c := &Client{}
	ctx := context.Background()
	dir := t.TempDir()
	id := submitSleeper(t, c, dir, "")
	waitState(t, c, id, JobRunning)

	job, err := c.ShowJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ExpandHostlist(job.NodeList)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != JobRunning || job.Partition != "gpu_ai" || len(nodes) != 1 || job.BatchHost != nodes[0] ||
		job.StartTime.IsZero() || !job.PreemptTime.IsZero() || job.Restarts != 0 || !job.Requeue {
		t.Errorf("ShowJob of a running job = %+v", job)
	}

	waitFor(t, "the job's env file", func() (bool, error) { _, err := os.Stat(dir + "/env.0"); return err == nil, nil })
	alloc, err := AllocationFromEnv(envFile(t, dir+"/env.0"))
	if err != nil {
		t.Fatal(err)
	}
	cwd, err := os.Getwd() // sbatch ran here; -D only sets the job's working directory
	if err != nil {
		t.Fatal(err)
	}
	want := Allocation{JobID: id, JobName: job.JobName, Partition: "gpu_ai", Nodes: nodes, BatchNode: job.BatchHost, SubmitDir: cwd}
	if d := cmp.Diff(want, alloc); d != "" {
		t.Errorf("AllocationFromEnv in the job (-want +got):\n%s", d)
	}

	if err := c.Requeue(ctx, id); err != nil {
		t.Fatal(err)
	}
	job, err = c.ShowJob(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if job.Restarts != 1 {
		t.Errorf("after Requeue: Restarts = %d, want 1", job.Restarts)
	}
	waitState(t, c, id, JobPending)
	if err := c.ReleaseNow(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, JobRunning)
	waitFor(t, "the second run's env file", func() (bool, error) { _, err := os.Stat(dir + "/env.1"); return err == nil, nil })
	alloc, err = AllocationFromEnv(envFile(t, dir+"/env.1"))
	if err != nil || alloc.RestartCount != 1 {
		t.Errorf("second run: RestartCount = %d, %v; want 1", alloc.RestartCount, err)
	}

	if err := c.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, JobCancelled)
	if err := c.Cancel(ctx, id); err != nil {
		t.Errorf("Cancel of a cancelled job: %v", err)
	}
}

func TestE2EJobStates(t *testing.T) {
	c := &Client{}
	id := submitSleeper(t, c, t.TempDir(), "")
	waitState(t, c, id, JobRunning)
	const gone = "999999990"
	tests := []struct {
		name string
		ids  []string
		want map[string]JobState
	}{
		{name: "running", ids: []string{id}, want: map[string]JobState{id: JobRunning}},
		{name: "one gone", ids: []string{gone}, want: map[string]JobState{}},
		{name: "all gone", ids: []string{gone, "999999991"}, want: map[string]JobState{}},
		{name: "mix", ids: []string{gone, id}, want: map[string]JobState{id: JobRunning}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.JobStates(context.Background(), tt.ids)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("JobStates(%v) (-want +got):\n%s", tt.ids, d)
			}
		})
	}
	refs, err := c.JobsByName(context.Background(), "slurm-e2e-"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]JobRef{{ID: id, State: JobRunning}}, refs); d != "" {
		t.Errorf("JobsByName (-want +got):\n%s", d)
	}
}

func TestE2EStepsAndCancelStep(t *testing.T) {
	c := &Client{}
	ctx := context.Background()
	dir := t.TempDir()
	started := filepath.Join(dir, "step-started")
	body := "srun -N1 -n1 --overlap --job-name=e2e:sleeper bash -c 'touch " + started + "; exec sleep 600' & wait"
	id := submitSleeper(t, c, dir, body)
	step := id + ".0"
	waitFor(t, "step "+step, func() (bool, error) {
		steps, err := c.Steps(ctx, id)
		return slices.Contains(steps, step), err
	})
	// squeue lists a step before its node has launched the task; a
	// cancel in that window was lost once (the step then ran until the
	// job ended, 2 min later). The supervisor cancels steps only after
	// killing their srun, which ends them anyway: wait for the task here.
	waitFor(t, "step "+step+"'s task to start", func() (bool, error) {
		_, err := os.Stat(started)
		return err == nil, nil
	})
	if err := c.Cancel(ctx, step); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step "+step+" to go", func() (bool, error) {
		steps, err := c.Steps(ctx, id)
		return !slices.Contains(steps, step), err
	})
	if err := c.Cancel(ctx, step); err != nil {
		t.Errorf("Cancel of a gone step: %v", err)
	}
}

func TestE2ENoSuchJob(t *testing.T) {
	c := &Client{}
	_, err := c.ShowJob(context.Background(), "999999990")
	if !errors.Is(err, ErrNoSuchJob) || errors.Is(err, ErrUnavailable) {
		t.Errorf("ShowJob of an unknown job: %v, want ErrNoSuchJob only", err)
	}
	if err := c.Requeue(context.Background(), "999999990"); !errors.Is(err, ErrNoSuchJob) {
		t.Errorf("Requeue of an unknown job: %v, want ErrNoSuchJob", err)
	}
}

func TestE2ENodeAddrs(t *testing.T) {
	cluster := slurmtest.Need(t, "")
	c := &Client{}
	got, err := c.NodeAddrs(context.Background(), []string{"node1", "node2", "node3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node1": cluster.Addr("node1"), "node2": cluster.Addr("node2"), "node3": cluster.Addr("node3")}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NodeAddrs (-want +got):\n%s", d)
	}
	if _, err := c.NodeAddrs(context.Background(), []string{"node9"}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("NodeAddrs of an unknown node: %v, want a plain error", err)
	}
}

// TestE2EControllerDownIsNotNoSuchJob points the real commands at a
// controller port where nothing listens: Slurm's clients retry, then fail,
// and that must read as ErrUnavailable, never ErrNoSuchJob.
func TestE2EControllerDownIsNotNoSuchJob(t *testing.T) {
	dir := t.TempDir()
	conf, err := os.ReadFile(slurmtest.SlurmConfPath())
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(bad, append(conf, []byte("\nSlurmctldPort=9\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	wrap := func(name string) string {
		p := filepath.Join(dir, name)
		text := "#!/bin/sh\nSLURM_CONF=" + bad + " exec " + name + " \"$@\"\n"
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	slow := &Client{Scontrol: wrap("scontrol"), Squeue: wrap("squeue"), Scancel: wrap("scancel"), Timeout: 30 * time.Second}
	fast := &Client{Scontrol: slow.Scontrol, Timeout: time.Second}
	tests := []struct {
		name     string
		call     func() error
		timedOut bool
	}{
		{name: "show job, slurm gives up", call: func() error { _, err := slow.ShowJob(context.Background(), "1"); return err }},
		{name: "requeue, slurm gives up", call: func() error { return slow.Requeue(context.Background(), "1") }},
		{name: "job states, slurm gives up", call: func() error { _, err := slow.JobStates(context.Background(), []string{"1"}); return err }},
		{name: "cancel, slurm gives up", call: func() error { return slow.Cancel(context.Background(), "1") }},
		{name: "show job, our timeout", call: func() error { _, err := fast.ShowJob(context.Background(), "1"); return err }, timedOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoSuchJob) {
				t.Errorf("error %v: want ErrUnavailable only", err)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != tt.timedOut {
				t.Errorf("error %v: timed out = %v, want %v", err, got, tt.timedOut)
			}
		})
	}
}
