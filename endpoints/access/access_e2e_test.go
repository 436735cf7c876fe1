//go:build e2e

package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints/access/munge"
	"slurm-llm/slurm/slurmtest"
)

// e2eServer is the key endpoint and an identity echo on a test server on
// the controller's cluster address (the front door will mount both; the
// test through it comes with the front door's integration).
type e2eServer struct {
	url   string
	store *Store
	ident *Identifier
}

// startE2EServer serves KeysPath with the real munge, the system's users
// and the real sacctmgr (asking the test cluster's slurmdbd), and /whoami
// answering the request's identity as JSON.
func startE2EServer(t *testing.T, addr string, mode Mode) *e2eServer {
	t.Helper()
	dir := t.TempDir()
	store, err := OpenStore(filepath.Join(dir, "keys.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	proxies, _ := ParseProxies([]string{"127.0.0.1", "::1"})
	ident := NewIdentifier(IdentifyConfig{Mode: mode, TrustedProxies: proxies}, store, nil, nil)
	mux := http.NewServeMux()
	mux.Handle(KeysPath, NewKeyHandler(KeyHandlerOptions{Store: store, Accounts: NewAccounts(AccountsOptions{}),
		Verifier: munge.Verifier{}, Rate: 100, Burst: 100}))
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		id, err := ident.Identify(r)
		if err != nil {
			WriteUnauthorized(w, err.Error())
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"identity": id, "headers_left": len(r.Header.Values("Tailscale-User-Login"))})
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &e2eServer{url: "http://" + ln.Addr().String(), store: store, ident: ident}
}

// buildClient builds llm-upstreams where every user can run it.
func buildClient(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "access-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "llm-upstreams")
	if out, err := exec.Command("go", "build", "-o", bin, "slurm-llm/cmd/llm-upstreams").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// onNode runs argv as user inside node's network namespace (a command run
// on that node), and returns its stdout, stderr and error.
func onNode(ns, user string, argv ...string) (string, string, error) {
	args := append([]string{"netns", "exec", ns, "runuser", "-u", user, "--"}, argv...)
	cmd := exec.Command("ip", args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func whoami(t *testing.T, url, key string) (int, Identity) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Identity Identity }
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Identity
}

// TestE2EKeysFromMunge: on the namespace cluster with the real munge and
// slurmdbd, the cluster's test users create keys from node1 with
// llm-upstreams key (munge on the node, the front door's side running
// unmunge and sacctmgr), each key names its user and the user's default
// account as slurmdbd has it; a credential replayed is refused by munged itself; the
// user cannot revoke another user's key, root can, and the revoked key is
// then refused.
func TestE2EKeysFromMunge(t *testing.T) {
	c := slurmtest.Need(t, "netns")
	for _, b := range []string{"munge", "unmunge", "runuser"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("e2e: %s not installed", b)
		}
	}
	acct := c.NeedAccounting(t)
	alice, bob := acct.Both, acct.One
	bin := buildClient(t)
	srv := startE2EServer(t, net.JoinHostPort(c.ControllerAddr, "0"), ModeRequired)
	ns := c.Namespace(c.Nodes[0])

	create := func(user string) (key, id string) {
		out, errOut, err := onNode(ns, user, bin, "key", "create", "--url", srv.url, "--note", "e2e")
		if err != nil {
			t.Fatalf("key create as %s on %s: %v\n%s%s", user, c.Nodes[0], err, out, errOut)
		}
		key = strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		id, ok := KeyID(key)
		if !ok {
			t.Fatalf("key create printed %q", out)
		}
		return key, id
	}
	aliceKey, aliceID := create(alice)
	bobKey, _ := create(bob)
	if status, id := whoami(t, srv.url, aliceKey); status != 200 || id.User != alice || id.Account != acct.Accounts[0] || id.Source != SourceKey {
		t.Errorf("alice's key: %d %+v, want user %s account %s", status, id, alice, acct.Accounts[0])
	}
	if status, id := whoami(t, srv.url, bobKey); status != 200 || id.User != bob || id.Account != acct.Accounts[1] || id.Source != SourceKey {
		t.Errorf("bob's key: %d %+v, want user %s account %s", status, id, bob, acct.Accounts[1])
	}
	if data, _ := os.ReadFile(filepath.Join(filepath.Dir(srv.store.path), "keys.json")); bytes.Contains(data, []byte(aliceKey)) {
		t.Error("the keys file holds a key")
	}

	// a credential replayed: a second handler (no memory of the first) still refuses it, so munged did
	cred, err := exec.Command("runuser", "-u", alice, "--", "munge", "-s", `{"aud":"slurm-llm/keys/v1","op":"list"}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	other := startE2EServer(t, "127.0.0.1:0", ModeRequired)
	for i, url := range []string{srv.url, other.url} {
		req, _ := http.NewRequest(http.MethodGet, url+KeysPath, nil)
		req.Header.Set("Authorization", "MUNGE "+strings.TrimSpace(string(cred)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if i == 0 && resp.StatusCode != 200 {
			t.Errorf("first use of the credential: %d %v", resp.StatusCode, body)
		}
		if i == 1 && (resp.StatusCode != 401 || !strings.Contains(fmt.Sprint(body), "replayed_credential")) {
			t.Errorf("the credential replayed to another front door: %d %v, want 401 replayed_credential", resp.StatusCode, body)
		}
	}

	// bob cannot revoke alice's key; root revokes bob's; bob's key is then refused
	if _, errOut, err := onNode(ns, bob, bin, "key", "revoke", "--url", srv.url, "--id", aliceID); err == nil || !strings.Contains(errOut, "404") {
		t.Errorf("bob revoking alice's key: %v %s", err, errOut)
	}
	if status, _ := whoami(t, srv.url, aliceKey); status != 200 {
		t.Errorf("alice's key after bob's try: %d", status)
	}
	if out, errOut, err := onNode(ns, "root", bin, "key", "revoke", "--url", srv.url, "--user", bob); err != nil || !strings.HasPrefix(out, "revoked ") {
		t.Fatalf("root revoking bob's keys: %v %s%s", err, out, errOut)
	}
	if status, id := whoami(t, srv.url, bobKey); status != 401 {
		t.Errorf("bob's key after revoke: %d %+v, want 401", status, id)
	}
	if out, _, err := onNode(ns, alice, bin, "key", "list", "--url", srv.url); err != nil || !strings.Contains(out, aliceID) {
		t.Errorf("alice's list: %v %s", err, out)
	}
}

// TestE2EForgedTailscaleHeader: a Tailscale-User-Login sent from a node
// (not the local proxy) is stripped and ignored; the same header from the
// loopback, where tailscale serve connects from, names the user.
func TestE2EForgedTailscaleHeader(t *testing.T) {
	c := slurmtest.Need(t, "netns")
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("e2e: curl not installed")
	}
	srv := startE2EServer(t, net.JoinHostPort(c.ControllerAddr, "0"), ModeIdentify)
	ask := func(ns, url string) map[string]any {
		argv := []string{"curl", "-s", "--max-time", "10", "-H", "Tailscale-User-Login: alice@example.com", url + "/whoami"}
		if ns != "" {
			argv = append([]string{"ip", "netns", "exec", ns}, argv...)
		}
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		var body map[string]any
		if err := json.Unmarshal(out, &body); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		return body
	}
	forged := ask(c.Namespace(c.Nodes[0]), srv.url)
	if id := forged["identity"].(map[string]any); id["User"] != "" || forged["headers_left"] != 0.0 {
		t.Errorf("a forged header from %s: %v, want anonymous and the header stripped", c.Nodes[0], forged)
	}
	// the controller's own loopback is the trusted proxy: listen there too
	local := startE2EServer(t, "127.0.0.1:0", ModeIdentify)
	if trusted := ask("", local.url); trusted["identity"].(map[string]any)["User"] != "alice@example.com" {
		t.Errorf("the header from the loopback: %v, want alice@example.com", trusted)
	}
}
