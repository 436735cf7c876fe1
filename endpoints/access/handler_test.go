package access

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/access/munge"
)

// fakeMunge decodes credentials "MUNGE:base64(<uid>x<n>):" whose payloads the
// test registered, refusing the ones it marked.
type fakeMunge struct {
	payloads map[string][]byte
	errs     map[string]error
}

func (f *fakeMunge) Verify(ctx context.Context, cred []byte) (munge.Credential, error) {
	c := string(cred)
	// As munged's decoder, the fake ignores the unused low bits of the last
	// base64 character: another spelling of a credential is the credential.
	if body, ok := strings.CutPrefix(strings.TrimSuffix(c, ":"), "MUNGE:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(body); err == nil {
			c = "MUNGE:" + base64.StdEncoding.EncodeToString(raw) + ":"
		}
	}
	if err := f.errs[c]; err != nil {
		return munge.Credential{}, err
	}
	p, ok := f.payloads[c]
	if !ok {
		return munge.Credential{}, munge.ErrInvalid
	}
	var uid uint32
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(c, "MUNGE:"), ":"))
	fmt.Sscanf(string(raw), "%dx", &uid)
	return munge.Credential{UID: uid, Encoded: t0, TTL: 300 * time.Second, Payload: p}, nil
}

type fakeUsers struct{}

var uids = map[uint32]string{0: "root", 1001: "alice", 1002: "bob", 1003: "carol", 1004: "nobodyinslurm"}

func (fakeUsers) Name(uid uint32) (string, error) {
	if n, ok := uids[uid]; ok {
		return n, nil
	}
	return "", errors.New("unknown uid")
}

func (fakeUsers) InGroup(name, group string) (bool, error) {
	return name == "carol" && group == "llmadmin", nil
}

// sacctmgr answers as Slurm's would for the test's users.
func sacctmgr(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
	switch argv[5] {
	case "alice":
		return []byte("alice|chem|chem\nalice|chem|phys\n"), nil, nil
	case "bob":
		return []byte("bob|phys|phys\n"), nil, nil
	case "carol", "root":
		return []byte(argv[5] + "|root|root\n"), nil, nil
	}
	return nil, nil, nil
}

// keyRig is a KeyHandler over fakes, and a way to send it requests.
type keyRig struct {
	t     *testing.T
	h     *KeyHandler
	store *Store
	m     *fakeMunge
	n     int
}

func newKeyRig(t *testing.T, o KeyHandlerOptions) *keyRig {
	store, _ := OpenStore("", func() time.Time { return t0 })
	m := &fakeMunge{payloads: map[string][]byte{}, errs: map[string]error{}}
	o.Store, o.Verifier, o.Users = store, m, fakeUsers{}
	if o.Accounts == nil {
		o.Accounts = NewAccounts(AccountsOptions{Run: sacctmgr, Cluster: "c1"})
	}
	o.Now = func() time.Time { return t0 }
	if o.Rate == 0 {
		o.Rate, o.Burst = 1000, 1000
	}
	return &keyRig{t: t, h: NewKeyHandler(o), store: store, m: m}
}

// cred registers a credential of uid carrying req.
func (k *keyRig) cred(uid uint32, req KeyRequest) string {
	if req.Aud == "" {
		req.Aud = KeyAudience
	}
	k.n++
	c := "MUNGE:" + base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%dx%d", uid, k.n))) + ":"
	k.m.payloads[c], _ = json.Marshal(req)
	return c
}

// send sends cred with method and returns the status and decoded body.
func (k *keyRig) send(method, cred string) (int, map[string]any) {
	r := httptest.NewRequest(method, KeysPath, nil)
	if cred != "" {
		r.Header.Set("Authorization", "MUNGE "+cred)
	}
	w := httptest.NewRecorder()
	k.h.ServeHTTP(w, r)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		k.t.Fatalf("%s: body %q: %v", method, w.Body, err)
	}
	return w.Code, body
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestKeyHandlerCreate(t *testing.T) {
	tests := []struct {
		name     string
		uid      uint32
		req      KeyRequest
		method   string
		status   int
		code     string
		account  string
		accounts *Accounts
	}{
		{name: "default account", uid: 1001, req: KeyRequest{Op: "create", Note: "laptop"}, status: 201, account: "chem"},
		{name: "another of the user's accounts", uid: 1001, req: KeyRequest{Op: "create", Account: "phys"}, status: 201, account: "phys"},
		{name: "an account not the user's", uid: 1002, req: KeyRequest{Op: "create", Account: "chem"}, status: 403, code: "invalid_account"},
		{name: "no Slurm account", uid: 1004, req: KeyRequest{Op: "create"}, status: 403, code: "no_slurm_account"},
		{name: "no user name for the uid", uid: 4242, req: KeyRequest{Op: "create"}, status: 403, code: "unknown_user"},
		{name: "a shorter life", uid: 1001, req: KeyRequest{Op: "create", TTL: "1h"}, status: 201, account: "chem"},
		{name: "a longer life than key_ttl", uid: 1001, req: KeyRequest{Op: "create", TTL: "100000h"}, status: 400, code: "invalid_request"},
		{name: "another audience", uid: 1001, req: KeyRequest{Aud: "someone-else", Op: "create"}, status: 400, code: "invalid_request"},
		{name: "the op is not the method's", uid: 1001, req: KeyRequest{Op: "revoke", User: "bob"}, method: http.MethodPost, status: 400, code: "invalid_request"},
		{name: "accounts not asked: none", uid: 1001, req: KeyRequest{Op: "create"}, status: 201, account: "",
			accounts: NewAccounts(AccountsOptions{Disabled: true})},
		{name: "accounts not asked: no override", uid: 1001, req: KeyRequest{Op: "create", Account: "phys"}, status: 400, code: "invalid_request",
			accounts: NewAccounts(AccountsOptions{Disabled: true})},
		{name: "sacctmgr failing", uid: 1001, req: KeyRequest{Op: "create"}, status: 503, code: "slurm_unavailable",
			accounts: NewAccounts(AccountsOptions{Cluster: "c1", Run: func(context.Context, []string, []byte) ([]byte, []byte, error) {
				return nil, []byte("sacctmgr: error: Problem talking to the database"), errors.New("exit status 1")
			}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyRig(t, KeyHandlerOptions{Accounts: tt.accounts, KeyTTL: 24 * time.Hour})
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			status, body := k.send(method, k.cred(tt.uid, tt.req))
			if status != tt.status || errCode(body) != tt.code {
				t.Fatalf("status %d code %q, want %d %q: %v", status, errCode(body), tt.status, tt.code, body)
			}
			if status != 201 {
				if len(k.store.List("")) != 0 {
					t.Error("a key was stored for a refused request")
				}
				return
			}
			key, _ := body["key"].(string)
			got, ok := k.store.Lookup(key)
			if !ok {
				t.Fatalf("the key answered (%q) is not in the store", key)
			}
			if got.User != uids[tt.uid] || got.Account != tt.account || body["account"] != tt.account {
				t.Errorf("stored %+v, answered %v; want user %s account %q", got, body, uids[tt.uid], tt.account)
			}
			wantTTL := 24 * time.Hour
			if tt.req.TTL != "" {
				wantTTL, _ = time.ParseDuration(tt.req.TTL)
			}
			if !got.Expires.Equal(t0.Add(wantTTL)) {
				t.Errorf("expires %s, want %s", got.Expires, t0.Add(wantTTL))
			}
		})
	}
}

func TestKeyHandlerRefusesCredentials(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{})
	c := k.cred(1001, KeyRequest{Op: "list"})
	if status, _ := k.send(http.MethodGet, c); status != 200 {
		t.Fatalf("first use: %d", status)
	}
	// munged forgets what it decoded when it restarts; the front door does not
	status, body := k.send(http.MethodGet, c)
	if status != 401 || errCode(body) != "replayed_credential" {
		t.Errorf("the same credential again: %d %v", status, body)
	}
	for _, tt := range []struct {
		err    error
		status int
		code   string
	}{
		{munge.ErrReplayed, 401, "replayed_credential"},
		{munge.ErrExpired, 401, "expired_credential"},
		{munge.ErrInvalid, 401, "invalid_munge_credential"},
		{munge.ErrUnavailable, 503, "munge_unavailable"},
	} {
		c := k.cred(1001, KeyRequest{Op: "list"})
		k.m.errs[c] = tt.err
		if status, body := k.send(http.MethodGet, c); status != tt.status || errCode(body) != tt.code {
			t.Errorf("%v: %d %v, want %d %s", tt.err, status, body, tt.status, tt.code)
		}
	}
	if status, body := k.send(http.MethodGet, ""); status != 401 || errCode(body) != "invalid_munge_credential" {
		t.Errorf("no credential: %d %v", status, body)
	}
}

func TestKeyHandlerListAndRevoke(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{AdminGroup: "llmadmin"})
	create := func(uid uint32) string {
		status, body := k.send(http.MethodPost, k.cred(uid, KeyRequest{Op: "create"}))
		if status != 201 {
			t.Fatalf("create for %d: %d %v", uid, status, body)
		}
		return body["id"].(string)
	}
	a1, a2, b1 := create(1001), create(1001), create(1002)
	listIDs := func(uid uint32, all bool) (int, []string) {
		status, body := k.send(http.MethodGet, k.cred(uid, KeyRequest{Op: "list", All: all}))
		var ids []string
		keys, _ := body["keys"].([]any)
		for _, x := range keys {
			ids = append(ids, x.(map[string]any)["id"].(string))
			if _, leaked := x.(map[string]any)["hash"]; leaked {
				t.Error("a list shows a hash")
			}
		}
		return status, ids
	}
	sorted := func(ids ...string) []string {
		out := append([]string(nil), ids...)
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j] < out[i] {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	}
	if _, got := listIDs(1001, false); cmp.Diff(sorted(a1, a2), sorted(got...)) != "" {
		t.Errorf("alice lists %v, want her two", got)
	}
	if status, _ := listIDs(1002, true); status != 403 {
		t.Errorf("bob lists everyone's: %d, want 403", status)
	}
	if _, got := listIDs(1003, true); len(got) != 3 {
		t.Errorf("carol (admin group) lists %v, want all three", got)
	}
	revoke := func(uid uint32, req KeyRequest) (int, map[string]any) {
		req.Op = "revoke"
		return k.send(http.MethodDelete, k.cred(uid, req))
	}
	if status, body := revoke(1002, KeyRequest{ID: a1}); status != 404 {
		t.Errorf("bob revokes alice's key: %d %v, want 404", status, body)
	}
	if status, _ := revoke(1002, KeyRequest{User: "alice"}); status != 403 {
		t.Errorf("bob revokes all alice's keys: %d, want 403", status)
	}
	if status, body := revoke(1001, KeyRequest{ID: a1}); status != 200 || cmp.Diff([]any{a1}, body["revoked"]) != "" {
		t.Errorf("alice revokes her own: %d %v", status, body)
	}
	if status, body := revoke(0, KeyRequest{User: "bob"}); status != 200 || cmp.Diff([]any{b1}, body["revoked"]) != "" {
		t.Errorf("root revokes bob's: %d %v", status, body)
	}
	if status, body := revoke(1003, KeyRequest{ID: a2}); status != 200 || cmp.Diff([]any{a2}, body["revoked"]) != "" {
		t.Errorf("carol (admin group) revokes alice's: %d %v", status, body)
	}
	if status, _ := revoke(1001, KeyRequest{}); status != 400 {
		t.Errorf("revoke naming nothing: %d, want 400", status)
	}
	if n := len(k.store.List("")); n != 0 {
		t.Errorf("%d keys left", n)
	}
}

func TestKeyHandlerRateLimit(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{Rate: 0.5, Burst: 2})
	for i := 0; i < 2; i++ {
		if status, _ := k.send(http.MethodGet, k.cred(1001, KeyRequest{Op: "list"})); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
	}
	r := httptest.NewRequest(http.MethodGet, KeysPath, nil)
	r.Header.Set("Authorization", "MUNGE "+k.cred(1001, KeyRequest{Op: "list"}))
	w := httptest.NewRecorder()
	k.h.ServeHTTP(w, r)
	if w.Code != 429 || w.Header().Get("Retry-After") != "2" {
		t.Errorf("third at once: %d Retry-After %q, want 429 and 2", w.Code, w.Header().Get("Retry-After"))
	}
}

func TestKeyHandlerMaxKeys(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{})
	for i := 0; i < MaxKeysPerUser; i++ {
		if status, _ := k.send(http.MethodPost, k.cred(1002, KeyRequest{Op: "create"})); status != 201 {
			t.Fatalf("key %d: %d", i, status)
		}
	}
	if status, body := k.send(http.MethodPost, k.cred(1002, KeyRequest{Op: "create"})); status != 409 || errCode(body) != "too_many_keys" {
		t.Errorf("one more: %d %v", status, body)
	}
}

func TestParseKeyRequest(t *testing.T) {
	for _, tt := range []struct {
		name, payload string
		ok            bool
	}{
		{"create", `{"aud":"slurm-llm/keys/v1","op":"create","account":"chem","ttl":"1h","note":"laptop"}`, true},
		{"unknown field", `{"aud":"slurm-llm/keys/v1","op":"create","admin":true}`, false},
		{"trailing data", `{"aud":"slurm-llm/keys/v1","op":"list"}{}`, false},
		{"no audience (munge -n)", ``, false},
		{"a note with a newline", `{"aud":"slurm-llm/keys/v1","op":"create","note":"a\nb"}`, false},
		{"a user that is an option", `{"aud":"slurm-llm/keys/v1","op":"revoke","user":"-x"}`, false},
		{"too long", `{"aud":"slurm-llm/keys/v1","op":"create","note":"` + strings.Repeat("n", 2000) + `"}`, false},
	} {
		if _, err := parseKeyRequest([]byte(tt.payload)); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestReplayGuardTakesEverySpellingOfACredential: munge's decoder ignores
// the unused low bits of a credential's last base64 character, so a
// one-bit change of the text is the same credential (issue 37, defect 5:
// with munged restarted within the credential's 300 s, one credential read
// in transit made two keys). The guard keys on the decoded bytes and a
// spelling munge never writes is refused before unmunge runs.
func TestReplayGuardTakesEverySpellingOfACredential(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{})
	k.n = 11 // "1001x12": 7 bytes, so its base64 ends in "==" and 4 unused bits
	c := k.cred(1001, KeyRequest{Op: "create"})
	if status, body := k.send(http.MethodPost, c); status != 201 {
		t.Fatalf("first use: %d %v", status, body)
	}
	body := strings.TrimSuffix(strings.TrimPrefix(c, "MUNGE:"), ":")
	last := strings.TrimRight(body, "=")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(alphabet, last[len(last)-1])
	other := "MUNGE:" + last[:len(last)-1] + string(alphabet[i^1]) + body[len(last):] + ":"
	if raw1, _ := base64.StdEncoding.DecodeString(body); !bytes.Equal(raw1, mustDecode(t, other)) {
		t.Fatalf("the test's other spelling %q decodes to other bytes", other)
	}
	status, got := k.send(http.MethodPost, other)
	if status == 201 {
		t.Fatalf("the same credential spelled %q made a second key", other)
	}
	if status != 401 {
		t.Errorf("another spelling: %d %v, want 401", status, got)
	}
	if keys := k.store.List("alice"); len(keys) != 1 {
		t.Errorf("alice has %d keys, want 1", len(keys))
	}
}

// mustDecode decodes a credential's base64 as munge does (low bits
// ignored).
func mustDecode(t *testing.T, cred string) []byte {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(cred, "MUNGE:"), ":"))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestKeyEndpointCannotBeShutForOthers: requests that are no credential
// spend nothing, and one user's burst is his own (issue 37, defect 4: one
// global bucket was spent before the method, scheme or armor were checked,
// so five bare GETs a second kept every user from creating, listing or
// revoking keys, a leaked key included).
func TestKeyEndpointCannotBeShutForOthers(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{Rate: 1, Burst: 5})
	junk := []struct{ method, auth string }{
		{http.MethodGet, ""}, {http.MethodPut, "MUNGE " + k.cred(1002, KeyRequest{Op: "list"})},
		{http.MethodGet, "Bearer x"}, {http.MethodGet, "MUNGE hello"}, {http.MethodGet, "MUNGE MUNGE:MTAwMXgxMi==:"},
	}
	for i := 0; i < 20; i++ {
		for _, j := range junk {
			r := httptest.NewRequest(j.method, KeysPath, nil)
			if j.auth != "" {
				r.Header.Set("Authorization", j.auth)
			}
			w := httptest.NewRecorder()
			k.h.ServeHTTP(w, r)
			if w.Code == 429 || w.Code < 400 {
				t.Fatalf("junk %s %q: %d", j.method, j.auth, w.Code)
			}
		}
	}
	// bob spends his own bucket and more
	for i := 0; i < 8; i++ {
		k.send(http.MethodGet, k.cred(1002, KeyRequest{Op: "list"}))
	}
	if status, _ := k.send(http.MethodGet, k.cred(1002, KeyRequest{Op: "list"})); status != 429 {
		t.Errorf("bob past his burst: %d, want 429", status)
	}
	for i := 0; i < 5; i++ {
		if status, body := k.send(http.MethodGet, k.cred(1001, KeyRequest{Op: "list"})); status != 200 {
			t.Fatalf("alice's request %d after the junk and bob's burst: %d %v", i, status, body)
		}
	}
}

// TestKeyEndpointBoundsUnmungeRuns: credentials that look right but are
// forged still cost an unmunge run each, and those are bounded for all
// requests together (UnmungeBurst at once).
func TestKeyEndpointBoundsUnmungeRuns(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{UnmungeRate: 1, UnmungeBurst: 10})
	forged := "MUNGE:" + base64.StdEncoding.EncodeToString([]byte("forged")) + ":"
	codes := map[int]int{}
	for i := 0; i < 15; i++ {
		r := httptest.NewRequest(http.MethodGet, KeysPath, nil)
		r.Header.Set("Authorization", "MUNGE "+forged)
		w := httptest.NewRecorder()
		k.h.ServeHTTP(w, r)
		codes[w.Code]++
	}
	if d := cmp.Diff(map[int]int{401: 10, 429: 5}, codes); d != "" {
		t.Errorf("15 forged credentials at once (-want +got):\n%s", d)
	}
}

// TestCredentialForALoopbackURLOnlyFromLoopback (issue 37, defect 6): a
// credential the key command made for http://127.0.0.1:8090 on a node,
// where another user may listen first and take it, is refused when it
// reaches the front door from elsewhere (another host, or through a proxy:
// tailscale serve and the shipped nginx site add X-Forwarded-For); made on
// the front door's own host and sent there directly, it is good.
func TestCredentialForALoopbackURLOnlyFromLoopback(t *testing.T) {
	for _, tt := range []struct {
		name, to, remote, forwarded string
		want                        int
	}{
		{name: "the door's own host, direct", to: "http://127.0.0.1:8090", remote: "127.0.0.1:40000", want: 201},
		{name: "another host", to: "http://127.0.0.1:8090", remote: "10.77.0.11:40000", want: 401},
		{name: "through tailscale serve", to: "http://127.0.0.1:8090", remote: "127.0.0.1:40000", forwarded: "100.64.0.7", want: 401},
		{name: "localhost from another host", to: "http://localhost:8090", remote: "10.77.0.11:40000", want: 401},
		{name: "the door's URL from another host", to: "https://slurm-ctl.example.ts.net", remote: "10.77.0.11:40000", want: 201},
		{name: "an old client (no to)", remote: "10.77.0.11:40000", want: 201},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := newKeyRig(t, KeyHandlerOptions{})
			r := httptest.NewRequest(http.MethodPost, KeysPath, nil)
			r.RemoteAddr = tt.remote
			if tt.forwarded != "" {
				r.Header.Set("X-Forwarded-For", tt.forwarded)
			}
			r.Header.Set("Authorization", "MUNGE "+k.cred(1001, KeyRequest{Op: "create", To: tt.to}))
			w := httptest.NewRecorder()
			k.h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Errorf("%d %s, want %d", w.Code, w.Body, tt.want)
			}
			if tt.want == 401 && !strings.Contains(w.Body.String(), "credential_for_another_door") {
				t.Errorf("body %s, want credential_for_another_door", w.Body)
			}
		})
	}
}

// TestOperatorKeysShareTheStoreAndTheReplayGuard: the key endpoint on the
// operator listener (root revokes a leaked key there while the client port
// is flooded) has limits of its own but the same keys and replay guard: a
// credential taken on one is refused on the other.
func TestOperatorKeysShareTheStoreAndTheReplayGuard(t *testing.T) {
	k := newKeyRig(t, KeyHandlerOptions{Rate: 1, Burst: 1, Replays: &ReplayGuard{}})
	o := k.h.o
	op := NewKeyHandler(o) // the operator's: same store, verifier and guard, its own limiters
	c := k.cred(1001, KeyRequest{Op: "create"})
	if status, body := k.send(http.MethodPost, c); status != 201 {
		t.Fatalf("create on the client port: %d %v", status, body)
	}
	// alice's bucket on the client port is spent
	if status, _ := k.send(http.MethodGet, k.cred(1001, KeyRequest{Op: "list"})); status != 429 {
		t.Fatalf("alice again at once on the client port: %d, want 429", status)
	}
	send := func(h *KeyHandler, method, cred string) int {
		r := httptest.NewRequest(method, KeysPath, nil)
		r.Header.Set("Authorization", "MUNGE "+cred)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := send(op, http.MethodPost, c); code != 401 {
		t.Errorf("the client port's credential again on the operator's: %d, want 401 (replayed)", code)
	}
	if code := send(op, http.MethodDelete, k.cred(0, KeyRequest{Op: "revoke", User: "alice"})); code != 200 {
		t.Errorf("root revokes alice's keys on the operator's endpoint: %d, want 200", code)
	}
	if n := len(k.store.List("alice")); n != 0 {
		t.Errorf("alice has %d keys after root's revoke, want 0", n)
	}
}
