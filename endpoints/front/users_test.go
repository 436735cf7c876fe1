package front

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/access/usage"
)

// The front door with package access wired (issue 28): who sent each
// request, their limits, fair share of a busy tier, and their usage.

// keyed is a rig whose front door knows users by static keys.
type keyed struct {
	*rig
	keys map[string]string // user → key
	db   string
}

// newKeyedRig makes static keys for users (account "acct-<user>"), a usage
// database, and a front door that identifies, limits and records.
func newKeyedRig(t *testing.T, edit func(*Config), users ...string) *keyed {
	t.Helper()
	dir := t.TempDir()
	k := &keyed{keys: map[string]string{}, db: filepath.Join(dir, "usage.db")}
	var lines strings.Builder
	for _, u := range users {
		key, _, _, err := access.NewKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k.keys[u] = key
		fmt.Fprintf(&lines, "%s acct-%s %s\n", u, u, key)
	}
	static := filepath.Join(dir, "static-keys")
	if err := os.WriteFile(static, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	k.rig = newRig(t, func(c *Config) {
		parsed, err := parseFront("", "fast", "reasoning")
		if err != nil {
			t.Fatal(err)
		}
		c.Access = parsed.Access
		c.Access.Auth.StaticKeysFile, c.Access.Auth.KeysFile, c.Access.Auth.SlurmAccounts = static, "", false
		c.Access.Usage.Database, c.Access.Usage.Flush = k.db, 10*time.Millisecond
		if edit != nil {
			edit(c)
		}
	})
	cfg := *k.s.cfg.Load()
	a, err := access.New(cfg.Access, access.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	k.s = New(cfg, Options{AccessLog: k.log, Transport: k.sent, Access: a})
	t.Cleanup(k.s.Close)
	k.srv.Config.Handler = k.s
	return k
}

// as posts a chat request as user ("" anonymous) and reads the answer.
func (k *keyed) as(user, model, tag string) (int, string) {
	k.t.Helper()
	hdr := []string{}
	if user != "" {
		hdr = append(hdr, "Authorization", "Bearer "+k.keys[user])
	}
	code, _, body := k.postRaw("/v1/chat/completions",
		fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, tag), hdr...)
	return code, body
}

// try is as for a goroutine: errors are the client's to see, not the
// test's.
func (k *keyed) try(user, model, tag string) {
	req, _ := http.NewRequest(http.MethodPost, k.srv.URL+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, tag)))
	req.Header.Set("Authorization", "Bearer "+k.keys[user])
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestWhoIsInTheAccessLogAndTheUsage: a request with a user's key is
// logged with the user, the account and the tokens, and recorded in the
// usage database; an anonymous one passes (identify mode) as anonymous.
func TestWhoIsInTheAccessLogAndTheUsage(t *testing.T) {
	k := newKeyedRig(t, nil, "alice")
	head := quickHead(t)
	k.route(nil, &testHead{tier: "fast", job: "1", models: []string{"tiny"}, srv: head})
	if code, body := k.as("alice", "tiny", "hi"); code != http.StatusOK {
		t.Fatalf("alice: %d %s", code, body)
	}
	if code, body := k.as("", "tiny", "hi"); code != http.StatusOK {
		t.Fatalf("anonymous: %d %s", code, body)
	}
	log := k.accessLog()
	if !strings.Contains(log, "user=alice account=acct-alice auth=static prompt_tokens=3 completion_tokens=1") ||
		!strings.Contains(log, "user=- account=- auth=anonymous") {
		t.Errorf("access log:\n%s", log)
	}
	if strings.Contains(log, k.keys["alice"]) {
		t.Error("the key is in the access log")
	}
	k.s.opts.Access.Close()
	db, err := usage.OpenReadOnly(k.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := usage.Summarize(t.Context(), db, usage.ByUser, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, r := range rep.Rows {
		got[r.User] = [2]int64{r.PromptTokens, r.CompletionTokens}
	}
	if d := cmp.Diff(map[string][2]int64{"alice": {3, 1}, "": {3, 1}}, got); d != "" {
		t.Errorf("usage by user (-want +got):\n%s", d)
	}
}

// TestOnlyRequestsForModelsAreUsage: a client's /health, /v1/models,
// OPTIONS and unknown paths are not usage; its chat completion is. Every
// request was recorded, so a client polling /v1/models (as chat front
// ends do) filled the database with rows of no tokens.
func TestOnlyRequestsForModelsAreUsage(t *testing.T) {
	k := newKeyedRig(t, nil, "alice")
	k.route(nil, &testHead{tier: "fast", job: "1", models: []string{"tiny"}, srv: quickHead(t)})
	for _, r := range []struct{ method, path string }{
		{"GET", "/health"}, {"GET", "/v1/models"}, {"OPTIONS", "/v1/chat/completions"}, {"GET", "/v1/nothing"},
	} {
		req, _ := http.NewRequest(r.method, k.srv.URL+r.path, nil)
		req.Header.Set("Authorization", "Bearer "+k.keys["alice"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if code, body := k.as("alice", "tiny", "hi"); code != http.StatusOK {
		t.Fatalf("alice's chat: %d %s", code, body)
	}
	k.s.opts.Access.Close()
	db, err := usage.OpenReadOnly(k.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := usage.Summarize(t.Context(), db, usage.ByUser, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]usage.Row{{User: "alice", Account: "acct-alice", Requests: 1, PromptTokens: 3, CompletionTokens: 1}}, rep.Rows,
		cmpopts.IgnoreFields(usage.Row{}, "HeldSeconds", "ServedSeconds")); d != "" {
		t.Errorf("usage by user (-want +got):\n%s", d)
	}
}

// TestRequiredModeRefusesWithoutAKey: mode "required" answers 401 in
// OpenAI's shape to a request with no key.
func TestRequiredModeRefusesWithoutAKey(t *testing.T) {
	k := newKeyedRig(t, func(c *Config) { c.Access.Auth.Mode = "required" }, "alice")
	k.route(nil, newTestHead(t, "fast", "1", "qwen-a"))
	code, body := k.as("", "qwen-a", "hi")
	if code != http.StatusUnauthorized || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("no key: %d %s", code, body)
	}
	if code, body := k.as("alice", "qwen-a", "hi"); code != http.StatusOK {
		t.Errorf("alice: %d %s", code, body)
	}
}

// TestPerUserLimitIs429: past a user's in-flight limit on a tier, 429
// rate_limit_exceeded with Retry-After; another user is not held to it.
func TestPerUserLimitIs429(t *testing.T) {
	k := newKeyedRig(t, func(c *Config) { c.Access.Limits.Default.InFlight = 1 }, "alice", "bob")
	h := newTestHead(t, "fast", "1", "qwen-a")
	h.setMode("block")
	k.route(nil, h)
	go k.try("alice", "qwen-a", "first") // held by the head until the test ends
	waitFor(t, "alice's first request at the head", func() bool { return len(h.requests()) == 1 })
	req, _ := http.NewRequest(http.MethodPost, k.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"qwen-a","messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+k.keys["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "rate_limit_exceeded") {
		t.Errorf("alice's second: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	go k.try("bob", "qwen-a", "bob's")
	waitFor(t, "bob's request at the head", func() bool { return len(h.requests()) == 2 })
	k.srv.CloseClientConnections()
}

// slotHead is a head with n slots (its /slots) whose answers wait until
// released, recording the order requests reach it.
type slotHead struct {
	*testHead
	release chan struct{}
	mu      sync.Mutex
	order   []string
	// metrics, when set, is its /metrics answer (else 501, as
	// llama-server without --metrics).
	metrics string
}

func newSlotHead(t *testing.T, n int) *slotHead {
	sh := &slotHead{release: make(chan struct{}, 1000)}
	sh.testHead = &testHead{t: t, tier: "fast", job: "1", models: []string{"qwen-a"}, left: make(chan struct{})}
	sh.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slots":
			slots := make([]map[string]any, n)
			for i := range slots {
				slots[i] = map[string]any{"id": i, "is_processing": false}
			}
			_ = json.NewEncoder(w).Encode(slots)
			return
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"qwen-a","object":"model"}]}`)
			return
		case "/metrics":
			sh.mu.Lock()
			m := sh.metrics
			sh.mu.Unlock()
			if m == "" {
				http.Error(w, `{"error":{"code":501}}`, http.StatusNotImplemented)
				return
			}
			io.WriteString(w, m)
			return
		}
		var req chatReq
		_ = json.NewDecoder(r.Body).Decode(&req)
		sh.mu.Lock()
		sh.order = append(sh.order, string(req.Messages[0].Content))
		sh.mu.Unlock()
		select {
		case <-sh.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(sh.srv.Close)
	return sh
}

// setMetrics sets its /metrics to say it has processing and deferred
// requests.
func (sh *slotHead) setMetrics(processing, deferred int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.metrics = fmt.Sprintf("# HELP llamacpp:requests_processing Number of requests processing\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n# HELP llamacpp:requests_deferred Number of requests deferred\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n", processing, deferred)
}

func (sh *slotHead) seen() []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]string(nil), sh.order...)
}

// TestBusyTierIsSharedFairly: on a head with 2 slots, alice keeps 6
// requests outstanding and bob sends one after them; when a slot frees,
// bob's goes next, not after alice's queue (llama-server's FIFO).
func TestBusyTierIsSharedFairly(t *testing.T) {
	k := newKeyedRig(t, noHeadQueue, "alice", "bob")
	sh := newSlotHead(t, 2)
	k.route(nil, sh.testHead)
	k.s.poller.pollAll(t.Context(), k.s.tab.Load().allHeads())
	if n := k.s.tab.Load().heads["fast"][0].slots.Load(); n != 2 {
		t.Fatalf("the head's slots read as %d", n)
	}
	var wg sync.WaitGroup
	send := func(user, tag string) {
		wg.Add(1)
		go func() { defer wg.Done(); k.as(user, "qwen-a", tag) }()
	}
	for i := range 6 {
		send("alice", fmt.Sprint("a", i))
		if i < 2 {
			waitFor(t, "alice's request at the head", func() bool { return len(sh.seen()) == i+1 })
		}
	}
	waitFor(t, "alice's 4 waiting", func() bool { return k.held("fast") == 4 })
	send("bob", "b0")
	waitFor(t, "bob's waiting", func() bool { return k.held("fast") == 5 })
	var users []UserStatus
	for _, ts := range k.s.Status().Tiers {
		if ts.Tier == "fast" {
			users = ts.Users
		}
	}
	if d := cmp.Diff([]UserStatus{{User: "alice", Serving: 2, Waiting: 4}, {User: "bob", Waiting: 1}}, users); d != "" {
		t.Errorf("/status users (-want +got):\n%s", d)
	}
	sh.release <- struct{}{} // one of alice's ends: a slot is free
	waitFor(t, "the next request at the head", func() bool { return len(sh.seen()) == 3 })
	if got := sh.seen()[2]; got != "b0" {
		t.Errorf("the freed slot went to %q, want bob's b0 (order %v)", got, sh.seen())
	}
	for range 8 {
		sh.release <- struct{}{}
	}
	wg.Wait()
	if got := sh.seen(); len(got) != 7 {
		t.Errorf("the head saw %v", got)
	}
}

// TestFairShareBehindTheHeadQueue: with the default head_queue a head of
// 2 slots takes 4 of alice's 8 requests (2 in its slots, 2 in its own
// queue) and the front door holds the rest; bob's request, sent after
// them, is the next to reach the head once one of alice's ends: behind
// the head's own queue, never behind alice's whole backlog.
func TestFairShareBehindTheHeadQueue(t *testing.T) {
	k := newKeyedRig(t, nil, "alice", "bob")
	sh := newSlotHead(t, 2)
	k.route(nil, sh.testHead)
	k.s.poller.pollAll(t.Context(), k.s.tab.Load().allHeads())
	var wg sync.WaitGroup
	send := func(user, tag string) {
		wg.Add(1)
		go func() { defer wg.Done(); k.as(user, "qwen-a", tag) }()
	}
	for i := range 8 {
		send("alice", fmt.Sprint("a", i))
		if i < 4 {
			waitFor(t, "alice's request at the head", func() bool { return len(sh.seen()) == i+1 })
		}
	}
	waitFor(t, "alice's 4 waiting", func() bool { return k.held("fast") == 4 })
	send("bob", "b0")
	waitFor(t, "bob's waiting", func() bool { return k.held("fast") == 5 })
	sh.release <- struct{}{}
	waitFor(t, "the next request at the head", func() bool { return len(sh.seen()) == 5 })
	if got := sh.seen()[4]; got != "b0" {
		t.Errorf("the head's queue took %q, want bob's b0 (order %v)", got, sh.seen())
	}
	for range 9 {
		sh.release <- struct{}{}
	}
	wg.Wait()
}
