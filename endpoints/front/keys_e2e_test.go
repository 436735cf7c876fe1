//go:build e2e

package front_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints/access"
	"slurm-llm/slurm/slurmtest"
)

// The key flow through the real front door (issue 28, "Measured": the key
// flow end to end): `llm-upstreams front` as a process on the controller,
// listening on every address, so that the nodes reach it on the
// controller's cluster address and tailscale serve would on the loopback;
// the cluster's test users (system users whose Slurm associations the
// cluster script made with sacctmgr, on its real slurmdbd) make keys with
// `llm-upstreams key` from node1 (munge in the node's network namespace,
// unmunge and sacctmgr run by the front door), and use them for chat
// completions, which the access log names with the account.

// keyUser makes a system user with useradd, removed at the end.
func keyUser(t *testing.T, name string) {
	t.Helper()
	_ = exec.Command("userdel", name).Run() // a leftover of a killed run
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v\n%s", name, err, out)
		}
	})
}

// asUserOn runs argv as user inside network namespace ns (a command run
// on that node) and returns its stdout, stderr and error.
func asUserOn(ns, user string, argv ...string) (string, string, error) {
	args := append([]string{"netns", "exec", ns, "runuser", "-u", user, "--"}, argv...)
	cmd := exec.Command("ip", args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

const keyChat = `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hello there"}]}`

// TestE2EFrontKeysFromMunge: alice (associations in accounts A and B,
// default A) makes a key on node1 and uses it from there for a chat
// completion through the front door, whose access line names her (user,
// her default Slurm account A as slurmdbd answers it, the key's id, the
// tokens) and whose usage database counts it; a key she makes with
// --account B counts under B; bob (in B only) cannot make one with
// --account A (403 invalid_account), and a user Slurm's accounting does
// not know cannot make one at all (403 no_slurm_account); a munge
// credential sent a second time is refused (401 replayed_credential);
// bob's key (his default account, B) works until root revokes it from
// node1 (bob could not revoke alice's), then it is refused (401) while
// alice's still works; a Tailscale-User-Login sent from node1 is ignored
// (anonymous) and the same header from the loopback, where tailscale serve
// connects from, names its login. `llm-upstreams usage` then counts each
// request under its user and account, and --by account under A and B.
func TestE2EFrontKeysFromMunge(t *testing.T) {
	c := slurmtest.Need(t, "netns")
	for _, b := range []string{"munge", "unmunge", "runuser", "curl"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("e2e: %s not installed", b)
		}
	}
	acct := c.NeedAccounting(t)
	alice, bob, carol := acct.Both, acct.One, "sllm-fd-carol"
	a, b := acct.Accounts[0], acct.Accounts[1]
	keyUser(t, carol) // a system user with no association in Slurm's accounting
	w := newDoorWorld(t)
	port, _ := w.head("tiny", "--parallel", "4", "--fake-tokens", "4", "--fake-token-rate", "0")
	w.publish("101", port, "tiny")
	fport := faketest.FreePort(t)
	cfg := w.config("keys", fmt.Sprintf("0.0.0.0:%d", fport), "[front.auth]\nmode = \"identify\"\nkey_rate = 100.0\nkey_burst = 100\n")
	local := fmt.Sprintf("http://127.0.0.1:%d", fport)
	url := "http://" + net.JoinHostPort(c.ControllerAddr, fmt.Sprint(fport))
	door := w.front(cfg, local)
	ns := c.Namespace(c.Nodes[0])
	lines := 0
	chat := func(key string, hdr ...string) (int, string) {
		t.Helper()
		if key != "" {
			hdr = append(hdr, "Authorization", "Bearer "+key)
		}
		code, _, err := post(url, "/v1/chat/completions", keyChat, hdr...)
		if err != nil {
			t.Fatal(err)
		}
		lines++
		return code, w.waitAccess("keys", lines)
	}
	create := func(user string, flags ...string) (key, id string) {
		t.Helper()
		out, errOut, err := asUserOn(ns, user, append([]string{w.bin, "key", "create", "--url", url, "--note", "e2e"}, flags...)...)
		if err != nil {
			t.Fatalf("key create as %s on %s: %v\n%s%s", user, c.Nodes[0], err, out, errOut)
		}
		key = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		if id, _ = access.KeyID(key); id == "" {
			t.Fatalf("key create printed %q", out)
		}
		return key, id
	}

	aliceKey, aliceID := create(alice)
	out, errOut, err := asUserOn(ns, alice, "curl", "-sS", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}",
		"-H", "Authorization: Bearer "+aliceKey, "-H", "Content-Type: application/json", "-d", keyChat, url+"/v1/chat/completions")
	lines++
	line := w.waitAccess("keys", lines)
	want := fmt.Sprintf("user=%s account=%s auth=key:%s prompt_tokens=2 completion_tokens=4", alice, a, aliceID)
	if err != nil || out != "200" || !strings.Contains(line, "status=200") || !strings.Contains(line, want) {
		t.Errorf("alice's chat from %s with her key: %v %q %s; access line:\n%s\nwant it to say %q", c.Nodes[0], err, out, errOut, line, want)
	}
	if strings.Contains(line, aliceKey) {
		t.Error("the key is in the access line")
	}

	// --account: another of alice's accounts; none of bob's; no key for carol
	aliceKeyB, aliceIDB := create(alice, "--account", b)
	if code, line := chat(aliceKeyB); code != http.StatusOK || !strings.Contains(line, fmt.Sprintf("user=%s account=%s auth=key:%s", alice, b, aliceIDB)) {
		t.Errorf("alice's chat with her key for account %s: %d; access line:\n%s", b, code, line)
	}
	for _, k := range []struct{ user, account, want string }{
		{bob, a, "403: account \"" + a + "\" is not one of yours (" + b + ") (invalid_account)"},
		{carol, "", "403: user " + carol + " has no Slurm account: ask the cluster's admins for one (no_slurm_account)"},
	} {
		argv := []string{w.bin, "key", "create", "--url", url}
		if k.account != "" {
			argv = append(argv, "--account", k.account)
		}
		if out, errOut, err := asUserOn(ns, k.user, argv...); err == nil || !strings.Contains(errOut, k.want) {
			t.Errorf("%s: key create --account %q: %v %s%s; want the front door's %q", k.user, k.account, err, out, errOut, k.want)
		}
	}

	// a credential sent a second time is refused
	cred, err := exec.Command("runuser", "-u", alice, "--", "munge", "-s", `{"aud":"slurm-llm/keys/v1","op":"list"}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodGet, url+access.KeysPath, nil)
		req.Header.Set("Authorization", "MUNGE "+strings.TrimSpace(string(cred)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if i == 0 && resp.StatusCode != http.StatusOK {
			t.Errorf("the credential's first use: %d %v", resp.StatusCode, body)
		}
		if i == 1 && (resp.StatusCode != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(body), "replayed_credential")) {
			t.Errorf("the credential replayed: %d %v, want 401 replayed_credential", resp.StatusCode, body)
		}
	}

	// bob's key, until root revokes it
	bobKey, _ := create(bob)
	if code, line := chat(bobKey); code != http.StatusOK || !strings.Contains(line, "user="+bob+" account="+b+" auth=key:") {
		t.Errorf("bob's chat: %d; access line:\n%s", code, line)
	}
	if _, errOut, err := asUserOn(ns, bob, w.bin, "key", "revoke", "--url", url, "--id", aliceID); err == nil || !strings.Contains(errOut, "404") {
		t.Errorf("bob revoking alice's key: %v %s; want the front door's 404", err, errOut)
	}
	if out, errOut, err := asUserOn(ns, "root", w.bin, "key", "revoke", "--url", url, "--user", bob); err != nil || !strings.HasPrefix(out, "revoked ") {
		t.Fatalf("root revoking bob's keys on %s: %v %s%s", c.Nodes[0], err, out, errOut)
	}
	if code, line := chat(bobKey); code != http.StatusUnauthorized || !strings.Contains(line, "status=401") {
		t.Errorf("bob's chat after root revoked his keys: %d; access line:\n%s\nwant 401", code, line)
	}
	if code, line := chat(aliceKey); code != http.StatusOK || !strings.Contains(line, "user="+alice) {
		t.Errorf("alice's chat after bob's keys were revoked: %d; access line:\n%s", code, line)
	}

	// a Tailscale identity: believed from the loopback only
	const login = "mallory@example.com"
	out, errOut, err = asUserOn(ns, "root", "curl", "-sS", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}",
		"-H", "Tailscale-User-Login: "+login, "-H", "Content-Type: application/json", "-d", keyChat, url+"/v1/chat/completions")
	lines++
	if line := w.waitAccess("keys", lines); err != nil || out != "200" || !strings.Contains(line, "user=- account=- auth=anonymous") {
		t.Errorf("a Tailscale-User-Login from %s: %v %q %s; access line:\n%s\nwant it anonymous", c.Nodes[0], err, out, errOut, line)
	}
	code, _, err := post(local, "/v1/chat/completions", keyChat, "Tailscale-User-Login", login)
	lines++
	if line := w.waitAccess("keys", lines); err != nil || code != http.StatusOK || !strings.Contains(line, "user="+login+" account=- auth=tailscale") {
		t.Errorf("the same header from the loopback: %v %d; access line:\n%s\nwant user=%s auth=tailscale", err, code, line, login)
	}
	t.Logf("access lines:\n%s", strings.Join(w.accessLines("keys"), "\n"))

	// the usage database: the chat completions, each under its user and
	// account (bob's refused one anonymous: nobody was known), nothing else
	w.stop(door)
	got := map[string][3]int64{}
	for _, r := range w.usageBy(cfg, "user").Rows {
		got[r.User+"/"+r.Account] = [3]int64{r.Requests, r.PromptTokens, r.CompletionTokens}
	}
	wantRows := map[string][3]int64{alice + "/" + a: {2, 4, 8}, alice + "/" + b: {1, 2, 4}, bob + "/" + b: {1, 2, 4},
		login + "/": {1, 2, 4}, "/": {2, 2, 4}}
	if d := cmp.Diff(wantRows, got); d != "" {
		t.Errorf("llm-upstreams usage --by user: requests, prompt and completion tokens (-want +got):\n%s", d)
	}
	got = map[string][3]int64{}
	for _, r := range w.usageBy(cfg, "account").Rows {
		got[r.Account] = [3]int64{r.Requests, r.PromptTokens, r.CompletionTokens}
	}
	wantRows = map[string][3]int64{a: {2, 4, 8}, b: {2, 4, 8}, "": {3, 4, 8}}
	if d := cmp.Diff(wantRows, got); d != "" {
		t.Errorf("llm-upstreams usage --by account: requests, prompt and completion tokens (-want +got):\n%s", d)
	}
}
