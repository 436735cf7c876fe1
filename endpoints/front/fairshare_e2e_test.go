//go:build e2e

package front_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/share"
	"slurm-llm/endpoints/front"
	"slurm-llm/slurm/slurmtest"
)

// sshareFactors reads the fair-share factors as the front door does
// (`sshare -a -n -P -o Account,User,FairShare`, parsed by package share).
func sshareFactors(t *testing.T) (map[share.Assoc]float64, string) {
	t.Helper()
	out, err := exec.Command("sshare", "-a", "-n", "-P", "-o", "Account,User,FairShare").Output()
	if err != nil {
		t.Fatalf("sshare: %v", err)
	}
	f, err := share.ParseSshare(out)
	if err != nil {
		t.Fatalf("sshare's output: %v\n%s", err, out)
	}
	return f, string(out)
}

// frontUsers is the front door's /status: each user of tier "fast" now.
func frontUsers(t *testing.T, metrics string) map[string]front.UserStatus {
	t.Helper()
	resp, err := http.Get(metrics + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st front.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	users := map[string]front.UserStatus{}
	for _, ts := range st.Tiers {
		if ts.Tier == "fast" {
			for _, u := range ts.Users {
				users[u.User] = u
			}
		}
	}
	return users
}

// TestE2EFrontSshareWeights: [front.fair_share] weights = "sshare" orders a
// busy tier by Slurm's own fair-share factors, read from the real slurmctld
// and slurmdbd. bob (the cluster's user in account B only) runs a job under
// B until Slurm has charged B with usage and sshare's factor for bob falls
// below alice's in A (no usage). Then, through the front door over a head
// with one slot: each is served once, bob for less head time than alice;
// a third request takes the slot; bob's request waits first and alice's
// after. Without weights bob's would go first (he came first and has had
// less of the head); alice's goes first, as her higher factor says.
func TestE2EFrontSshareWeights(t *testing.T) {
	c := slurmtest.Need(t, "")
	acct := c.NeedAccounting(t)
	alice, bob := acct.Both, acct.One
	a, b := acct.Accounts[0], acct.Accounts[1]
	if _, err := exec.LookPath("sshare"); err != nil {
		t.Skip("e2e: sshare not installed")
	}

	// Usage for bob under B. Without AccountingStorageEnforce=limits Slurm
	// charges a job only at its fair-share passes (every PriorityCalcPeriod,
	// 1 min here) while it runs, not at its end (FACTS-cluster.md A5): so
	// the job runs until a pass has charged it and sshare shows the factors
	// apart, then it is cancelled.
	job := exec.Command("runuser", "-u", bob, "--", "srun", "--account", b, "--partition", "gpu_ai", "--nodes", "1",
		"--ntasks", "1", "--time", "5", "--chdir", "/tmp", "--job-name", "sllm-fairshare-e2e", "--quiet", "sleep", "300")
	job.Dir = "/tmp"
	var jobOut faketest.Buffer
	job.Stdout, job.Stderr = &jobOut, &jobOut
	if err := job.Start(); err != nil {
		t.Fatalf("a job of %s under %s: %v", bob, b, err)
	}
	jobDone := make(chan error, 1)
	go func() { jobDone <- job.Wait() }()
	cancelJob := func() {
		// With the factors apart already (an earlier run's usage), this
		// comes at once, maybe before srun's job reached slurmctld: a
		// scancel by name would find nothing and the srun would run on.
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if out, _ := exec.Command("squeue", "-h", "-u", bob, "-n", "sllm-fairshare-e2e", "-o", "%i").Output(); len(bytes.TrimSpace(out)) > 0 {
				break
			}
		}
		if out, err := exec.Command("scancel", "--user", bob, "--name", "sllm-fairshare-e2e").CombinedOutput(); err != nil {
			t.Errorf("scancel %s's job: %v %s", bob, err, out)
		}
		select {
		case <-jobDone:
		case <-time.After(30 * time.Second):
			_ = job.Process.Kill()
			t.Errorf("%s's srun did not end 30 s after scancel:\n%s", bob, jobOut.String())
		}
	}
	var factors map[share.Assoc]float64
	var raw string
	deadline := time.Now().Add(150 * time.Second)
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		factors, raw = sshareFactors(t)
		if factors[share.Assoc{Account: a, User: alice}] > factors[share.Assoc{Account: b, User: bob}] {
			break
		}
		if time.Now().After(deadline) {
			cancelJob()
			t.Fatalf("sshare never put %s in %s above %s in %s while %s's job ran:\n%s\nsrun: %s", alice, a, bob, b, bob, raw, jobOut.String())
		}
		select {
		case err := <-jobDone:
			t.Fatalf("%s's job ended early: %v\n%s", bob, err, jobOut.String())
		case <-poll.C:
		}
	}
	cancelJob()
	fa, fb := factors[share.Assoc{Account: a, User: alice}], factors[share.Assoc{Account: b, User: bob}]
	fb = math.Max(fb, share.MinWeight)
	t.Logf("sshare -a -n -P -o Account,User,FairShare:\n%s", raw)
	if fa/fb < 1.2 {
		t.Fatalf("factors %s/%s %.3f, %s/%s %.3f: too close for a measurable order", alice, a, fa, bob, b, fb)
	}

	w := newDoorWorld(t)
	const rate = 20 // tokens a second: a token is 50 ms of head time
	port, _ := w.head("tiny", "--parallel", "1", "--fake-tokens", "200", "--fake-token-rate", fmt.Sprint(rate))
	w.publish("101", port, "tiny")
	fport, mport := faketest.FreePort(t), faketest.FreePort(t)
	cfg := w.config("share", fmt.Sprintf("127.0.0.1:%d", fport), fmt.Sprintf(`metrics_listen = "127.0.0.1:%d"
[front.auth]
mode = "identify"
key_rate = 100.0
key_burst = 100
[front.fair_share]
enabled = true
weights = "sshare"
[front.tiers.fast]
head_queue = -1 # none in the head's own queue: the waiting two are ordered by the front door alone
`, mport))
	url, metrics := fmt.Sprintf("http://127.0.0.1:%d", fport), fmt.Sprintf("http://127.0.0.1:%d", mport)
	w.front(cfg, url)
	keys := map[string]string{}
	for _, u := range []string{alice, bob} {
		out, err := exec.Command("runuser", "-u", u, "--", w.bin, "key", "create", "--url", url).Output()
		if err != nil {
			t.Fatalf("key create as %s: %v %s", u, err, out)
		}
		keys[u] = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		if _, ok := access.KeyID(keys[u]); !ok {
			t.Fatalf("key create as %s printed %q", u, out)
		}
	}
	chat := func(key string, tokens int) (int, error) {
		body := fmt.Sprintf(`{"model":"tiny","max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}`, tokens)
		var hdr []string
		if key != "" {
			hdr = []string{"Authorization", "Bearer " + key}
		}
		code, _, err := post(url, "/v1/chat/completions", body, hdr...)
		return code, err
	}

	// Head time served: alice 20 tokens, bob between 20·fb/fa (where the
	// weights tie) and 20 (where arrival would): less than hers, more than
	// his weight lets outweigh.
	nA := 20
	nB := int(math.Round(float64(nA) * (1 + fb/fa) / 2))
	for _, s := range []struct {
		user string
		n    int
	}{{alice, nA}, {bob, nB}} {
		if code, err := chat(keys[s.user], s.n); err != nil || code != http.StatusOK {
			t.Fatalf("%s's first request: %d %v", s.user, code, err)
		}
	}
	waitUsers := func(what string, ok func(map[string]front.UserStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(frontUsers(t, metrics)) {
			if time.Now().After(deadline) {
				t.Fatalf("the front door's /status never showed %s: %v", what, frontUsers(t, metrics))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	blocked := make(chan error, 1)
	go func() { _, err := chat("", 3*rate); blocked <- err }() // 3 s on the only slot, anonymous
	waitUsers("the anonymous request on the head", func(u map[string]front.UserStatus) bool { return u[""].Serving == 1 })
	done := make(chan string, 2)
	for _, u := range []string{bob, alice} {
		go func() {
			if code, err := chat(keys[u], 2); err != nil || code != http.StatusOK {
				t.Errorf("%s's waiting request: %d %v", u, code, err)
			}
			done <- u
		}()
		waitUsers(u+"'s request waiting", func(s map[string]front.UserStatus) bool { return s[u].Waiting == 1 })
	}
	select {
	case err := <-blocked:
		t.Fatalf("the slot was free before both requests waited (%v): the order was not decided by fair share", err)
	default:
	}
	first, second := <-done, <-done
	t.Logf("factors %s/%s %.3f, %s/%s %.3f; head time served before: %s %d tokens, %s %d (%d/s); "+
		"waiting: %s's first, then %s's; served first: %s, then %s", alice, a, fa, bob, b, fb, alice, nA, bob, nB, rate,
		bob, alice, first, second)
	if first != alice {
		t.Errorf("served first: %s; want %s, whose fair-share factor is higher (%.3f against %.3f)", first, alice, fa, fb)
	}
	<-blocked
}
