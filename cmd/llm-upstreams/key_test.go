package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/munge"
	usagedb "slurm-llm/endpoints/access/usage"
)

// pretendMunge hands out credentials "MUNGE:base64(N):" for uid 1001 and decodes
// them once each, as munged would.
type pretendMunge struct {
	mu       sync.Mutex
	n        int
	payloads map[string][]byte
}

func (p *pretendMunge) encode(ctx context.Context, payload []byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	c := "MUNGE:" + base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(p.n))) + ":"
	p.payloads[c] = payload
	return []byte(c), nil
}

func (p *pretendMunge) Verify(ctx context.Context, cred []byte) (munge.Credential, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl, ok := p.payloads[string(cred)]
	if !ok {
		return munge.Credential{}, munge.ErrInvalid
	}
	delete(p.payloads, string(cred))
	return munge.Credential{UID: 1001, Encoded: time.Now(), TTL: 300 * time.Second, Payload: pl}, nil
}

type oneUser struct{}

func (oneUser) Name(uid uint32) (string, error)          { return "alice", nil }
func (oneUser) InGroup(name, group string) (bool, error) { return false, nil }

func TestKeyCommands(t *testing.T) {
	m := &pretendMunge{payloads: map[string][]byte{}}
	store, _ := access.OpenStore("", nil)
	h := access.NewKeyHandler(access.KeyHandlerOptions{Store: store, Verifier: m, Users: oneUser{},
		Accounts: access.NewAccounts(access.AccountsOptions{Disabled: true})})
	srv := httptest.NewServer(h)
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		o := keyOptions{op: args[0], url: srv.URL, stdout: &out, stderr: &errOut, encode: m.encode, timeout: 5 * time.Second,
			getenv: func(string) string { return "" }}
		for i := 1; i < len(args); i += 2 {
			switch args[i] {
			case "--note":
				o.note = args[i+1]
			case "--id":
				o.id = args[i+1]
			}
		}
		code := o.run(context.Background())
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run("create", "--note", "laptop")
	key := strings.SplitN(out, "\n", 2)[0]
	id, ok := access.KeyID(key)
	if code != 0 || !ok || !strings.Contains(errOut, "shown this once") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if _, found := store.Lookup(key); !found {
		t.Fatal("the key printed is not the key stored")
	}
	if code, out, _ := run("list"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "laptop") {
		t.Errorf("list: %d %q", code, out)
	}
	if code, out, _ := run("revoke", "--id", id); code != 0 || out != "revoked "+id+"\n" {
		t.Errorf("revoke: %d %q", code, out)
	}
	if code, _, errOut := run("revoke", "--id", id); code != exitFailed || !strings.Contains(errOut, "404") {
		t.Errorf("revoke again: %d %q", code, errOut)
	}
	if code, _, errOut := run("revoke"); code != exitUsage || !strings.Contains(errOut, "--id") {
		t.Errorf("revoke naming nothing: %d %q", code, errOut)
	}
	var out2, errOut2 bytes.Buffer
	o := keyOptions{op: "list", stdout: &out2, stderr: &errOut2, config: "/nonexistent", getenv: func(string) string { return "" }}
	if code := o.run(context.Background()); code != exitUsage || !strings.Contains(errOut2.String(), URLEnv) {
		t.Errorf("no URL: %d %q", code, errOut2.String())
	}
}

func TestUsageCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "upstreams.toml")
	os.WriteFile(cfg, []byte("allow_any_owner = true\nallow_any_network = true\nendpoint_dir = \"/e\"\nstate_dir = \""+dir+"\"\n[tiers.fast]\n"), 0o644)
	r, err := usagedb.Open(filepath.Join(dir, "usage.db"), usagedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Add(usagedb.Record{Time: time.Now().Add(-time.Hour), User: "alice", Account: "chem", Tier: "fast", Model: "m", Status: 200,
		Outcome: "answered", PromptTokens: 7, CompletionTokens: 35})
	r.Add(usagedb.Record{Time: time.Now().Add(-40 * 24 * time.Hour), User: "bob", Account: "phys", Tier: "fast", Model: "m", Status: 200,
		Outcome: "answered", PromptTokens: 1, CompletionTokens: 1})
	r.Close()
	var out, errOut bytes.Buffer
	if code := run([]string{"usage", "--config", cfg, "--since", "30d", "--by", "account"}, &out, &errOut); code != 0 {
		t.Fatalf("usage: %d %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "Usage by account") || !strings.Contains(out.String(), "chem") || strings.Contains(out.String(), "phys") ||
		!strings.Contains(out.String(), "42") {
		t.Errorf("usage table:\n%s", out.String())
	}
	if code := run([]string{"usage", "--config", cfg, "--by", "project"}, &out, &errOut); code != exitUsage {
		t.Errorf("--by project: %d", code)
	}
	os.Remove(filepath.Join(dir, "usage.db"))
	errOut.Reset()
	if code := run([]string{"usage", "--config", cfg}, &out, &errOut); code != exitFailed || !strings.Contains(errOut.String(), "usage.db") {
		t.Errorf("no database: %d %s", code, errOut.String())
	}
}

// TestKeyCommandNeverDefaultsToALocalAddress (issue 37, defect 6): without
// --url or $SLURM_LLM_URL the key command took the config's [front] listen
// and made a wildcard loopback: run on a node, it sent a fresh credential
// to the node's own 127.0.0.1:8090, where any other user could listen
// first and trade it for a key in the caller's name. A loopback or
// wildcard listen is now refused before munge runs; one address of the
// network is still taken; what is sent names the URL it was made for.
func TestKeyCommandNeverDefaultsToALocalAddress(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ listen, want string }{
		{listen: "127.0.0.1:8090"}, {listen: "0.0.0.0:8090"}, {listen: "[::1]:8090"}, {listen: ":8090"}, {listen: "localhost:8090"},
		{listen: "10.77.0.1:8090", want: "http://10.77.0.1:8090"},
	} {
		t.Run(tt.listen, func(t *testing.T) {
			cfg := filepath.Join(dir, "upstreams.toml")
			body := "allow_any_owner = true\nallow_any_network = true\nendpoint_dir = \"/e\"\n[tiers.fast]\n[front]\nlisten = \"" + tt.listen + "\"\n"
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			encoded := 0
			o := keyOptions{op: "list", config: cfg, stdout: &out, stderr: &errOut, timeout: time.Second,
				getenv: func(string) string { return "" },
				encode: func(ctx context.Context, p []byte) ([]byte, error) {
					encoded++
					return nil, errors.New("no munge here")
				}}
			got, err := o.frontURL()
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--url") {
					t.Errorf("frontURL = %q, %v; want an error naming --url", got, err)
				}
				if code := o.run(context.Background()); code != exitUsage || encoded != 0 {
					t.Errorf("run: exit %d, munge run %d times; want %d and 0: %s", code, encoded, exitUsage, errOut.String())
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("frontURL = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	// The payload names the front door it was made for.
	var payload []byte
	o := keyOptions{op: "list", url: "https://slurm-ctl.example.ts.net", stdout: io.Discard, stderr: io.Discard, timeout: time.Second,
		getenv: func(string) string { return "" },
		encode: func(ctx context.Context, p []byte) ([]byte, error) { payload = p; return nil, errors.New("stop here") }}
	o.run(context.Background())
	if !strings.Contains(string(payload), `"to":"https://slurm-ctl.example.ts.net"`) {
		t.Errorf("payload %s does not name the front door", payload)
	}
}
