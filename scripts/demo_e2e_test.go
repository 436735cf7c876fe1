//go:build e2e

// Package scripts_test runs the project's scripts the way a person does.
package scripts_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/slurm/slurmtest"
)

// TestDemoE2E runs `make demo`'s path (scripts/demo.sh) on the local cluster: both tiers
// come up and answer through nginx; two users made for the demo make keys with munge, one
// floods the reasoning tier while the other's request goes next, and both show in
// `llm-upstreams usage`; a one-node high-priority job preempts the fast tier,
// which the keeper releases and which comes back on another node; under load the fast
// tier grows to three replicas, a science job takes one (no request fails) and it shrinks
// back to one; the elastic reasoning tier loses one member to a science job, serves on the
// other two and grows back (these two on the namespace cluster, which CI runs; skipped on
// loopback); a time-limited job
// takes every node, nginx answers 503 with Retry-After and when the tiers are expected
// back, and they come back by themselves; the availability report shows it.
func TestDemoE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the demo needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var args []string
	if c, ok, _ := slurmtest.Load(); ok && c.Root() != "" {
		// The Slurm 24.11 lane: packages installed into the host's /usr after up are not in the
		// root its jobs run in; /usr/local is (scripts/FACTS-cluster.md).
		args = append(args, "--from-source")
	}
	cmd := exec.CommandContext(ctx, "./demo.sh", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout, TERM lets the demo's cleanup trap stop what it started; KILL follows.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 90 * time.Second
	err := cmd.Run()
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo.sh: %v", err)
	}
	text := out.String()
	want := []string{
		":8080 → ",                // fast answered through nginx
		":8081 → ",                // reasoning answered through nginx
		":8090 fast-tiny → ",      // the front door: one URL, the fast model
		":8090 OR1-Behemoth → ",   // and the reasoning model
		"X-LLM-Tier: reasoning)",  // each from its own tier
		"reasoning/v1/chat/c",     // the seed's URL of the reasoning tier, through the front door
		", 0 failed; the longest", // a partial preemption no front-door client saw
		"fast is back on node",    // the partial preemption: back elsewhere
		"released requeued job",   // by the keeper's release
		"Retry-After:",            // the preempted tier's 503 carried Retry-After
		`"expected_back":"`,       // and when it is expected back
		"both tiers answer again", // and came back
		"Restarts=2",              // fast: through two requeues of the same job
		"Restarts=1",              // reasoning: one
		"PREEMPTIONS",             // the availability report
		"demo finished",           // and the demo ran to its end

		"runs llm-upstreams key create: munge proves its uid", // a key made with munge, as a user made for the demo
		", user sllm-demo-bob, account physics, expires",      // counted under the account slurmdbd has for him
		"sllm-demo-bob sends one meanwhile: answered in",      // a flood by one user, another's request beside it
		" sllm-demo-bob ", // and both users in llm-upstreams usage
	}
	if strings.Contains(text, "replicas: skipped") {
		t.Log("a loopback cluster was up: the demo skipped its replicas step")
	} else {
		want = append(want,
			"3 replicas routed",             // the replicas step: grown onto the idle nodes under load
			"an extra never runs again",     // a science job took one replica's node
			", 0 not answered 200",          // and no request failed meanwhile
			"the extra's job ended",         // back to one when the load stopped
			"serving on 2 of 3 nodes",       // the elastic tier: a science job took one member
			"serving on 3 of 3 nodes again", // and it grew back
		)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("demo output lacks %q", w)
		}
	}
	if strings.Contains(text, "FAILED") {
		t.Errorf("demo output reports a failure")
	}
	// The demo stops what it started, also on a cluster that was up before
	// it (as here in CI), where the next tests need every node.
	if out, err := exec.Command("squeue", "-h", "-n", "llm-fast,llm-fast-extra,llm-reasoning,vasp-demo", "-o", "%i %j %T").CombinedOutput(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("jobs the demo started are left in the queue:\n%s", out)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			_ = exec.Command("scancel", strings.Fields(line)[0]).Run() // so the next tests have the nodes
		}
	}
}
