//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/front/fronttest"
)

// The front door's edges of issue 27 with real clients against the real
// `llm-upstreams front` process (doorWorld): each test is one promise a
// new user met broken, and fails when its fix is undone.

// chatBody is a small chat request for model.
func chatBody(model string) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`, model)
}

// TestE2EFrontCurlExpectContinueOnALoadingHead: Debian 12's curl sends
// its own Expect: 100-continue for a body over 1 MiB (slurm-facts 34); the
// head, still loading while its file already says ready, answers 100
// Continue and then its 503. The front door passed the header on, took
// the head's 100 for the answer's start and gave curl an empty 200
// (access log status=100 outcome=answered); now the 503 is retried like
// any head's 503 and curl gets the head's answer once it has loaded.
func TestE2EFrontCurlExpectContinueOnALoadingHead(t *testing.T) {
	w := newDoorWorld(t, doorOpts{})
	head := w.head("fast", "11", "qwen-a", "--fake-load-time", "6s")
	w.front()
	content := strings.Repeat("x", 2<<20)
	file := filepath.Join(w.dir, "long-document.json")
	if err := os.WriteFile(file, []byte(`{"model":"qwen-a","max_tokens":4,"messages":[{"role":"user","content":"`+content+`"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if headStatus(head) != http.StatusServiceUnavailable {
		t.Fatalf("the head no longer loads (/health %d): the request would not meet its 503", headStatus(head))
	}
	verbose := filepath.Join(w.dir, "curl-trace")
	code, hdr, body, err := curl("--stderr", verbose, "-v", "-H", "Content-Type: application/json",
		"--data-binary", "@"+file, w.url+"/v1/chat/completions")
	trace, _ := os.ReadFile(verbose)
	if !strings.Contains(string(trace), "> Expect: 100-continue") {
		t.Fatalf("curl did not send its own Expect: 100-continue (the test crosses nothing):\n%s", tail(trace, 2000))
	}
	var answer struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal([]byte(body), &answer)
	if err != nil || code != http.StatusOK || hdr.Get("X-LLM-Tier") != "fast" || len(answer.Choices) != 1 || answer.Choices[0].Message.Content == "" {
		t.Errorf("curl got %d (tier %q) %.300q (%v); want the head's answer", code, hdr.Get("X-LLM-Tier"), body, err)
	}
	line := w.accessLines("/v1/chat/completions", 1)[0]
	t.Logf("access log: %s", line)
	m := regexp.MustCompile(` status=(\d+) .* attempts=(\d+) outcome=(\S+)`).FindStringSubmatch(line)
	if m == nil || m[1] != "200" || m[3] != "answered" {
		t.Errorf("access line %q: want status=200 outcome=answered", line)
	}
	if n, _ := strconv.Atoi(m[2]); n < 2 {
		t.Errorf("attempts=%d: the loading head's 503 was not retried (the head was loading when curl started)", n)
	}
	// Bodies like this one are what the soft memory limit is for: the
	// shipped max_body_bytes_in_flight (256 MiB) + 128 MiB.
	if got := w.metric("go_gc_gomemlimit_bytes"); got != 384<<20 {
		t.Errorf("go_gc_gomemlimit_bytes = %v, want %d (max_body_bytes_in_flight + 128 MiB)", got, 384<<20)
	}
}

// TestE2EFrontSeedURLs: the site's clients call
// https://CONTROLLER/reasoning/v1/... (tailscale serve's /reasoning
// mount onto nginx's reasoning port); through the front door that was a
// 404 "unknown path", so moving tailscale serve to it broke every client
// configured so. With the shipped prefix, curl and the official OpenAI
// Node SDK (baseURL http://FRONT/reasoning/v1) reach the reasoning tier:
// its model, and a name no tier serves (the tier's llama-server answered
// any name); the models there list the tier's model alone; a fast model
// under /reasoning is a clean 400; the root still routes by model.
func TestE2EFrontSeedURLs(t *testing.T) {
	node := fronttest.NeedNode(t)
	w := newDoorWorld(t, doorOpts{})
	w.ready(w.head("fast", "21", "qwen-a"))
	w.ready(w.head("reasoning", "22", "OR1-Behemoth"))
	w.front()
	w.models("qwen-a", "OR1-Behemoth")
	for _, tc := range []struct {
		path, model string
		code        int
		tier        string
	}{
		{"/reasoning/v1/chat/completions", "OR1-Behemoth", 200, "reasoning"},
		{"/reasoning/v1/chat/completions", "gpt-4o", 200, "reasoning"},
		{"/reasoning/v1/chat/completions", "qwen-a", 400, "none"},
		{"/v1/chat/completions", "qwen-a", 200, "fast"},
		{"/v1/chat/completions", "OR1-Behemoth", 200, "reasoning"},
	} {
		code, hdr, body, err := post(w.url+tc.path, chatBody(tc.model))
		if err != nil || code != tc.code || hdr.Get("X-LLM-Tier") != tc.tier {
			t.Errorf("curl %s %s: %d from tier %q %.300q (%v); want %d from %s", tc.path, tc.model, code, hdr.Get("X-LLM-Tier"), body, err, tc.code, tc.tier)
		}
		if tc.code == 400 && !strings.Contains(body, "served by tier fast") {
			t.Errorf("curl %s %s: %q; want the 400 to say the model is the fast tier's", tc.path, tc.model, body)
		}
	}
	if code, _, body, err := curl(w.url + "/reasoning/v1/models"); err != nil || code != 200 || ids(body) != "OR1-Behemoth" {
		t.Errorf("curl /reasoning/v1/models: %d %q (%v); want OR1-Behemoth alone", code, body, err)
	}
	if err := fronttest.CurlStream(w.url+"/reasoning", "OR1-Behemoth", 8, nil).Whole(8); err != nil {
		t.Errorf("curl streaming from /reasoning/v1/chat/completions: %v", err)
	}

	calls, err := node.Calls(w.url+"/reasoning/v1", "models", "chat:OR1-Behemoth", "chat:gpt-4o", "chat:qwen-a")
	if err != nil {
		t.Fatal(err)
	}
	if ms := calls[0].Models; len(ms) != 1 || ms[0].ID != "OR1-Behemoth" || ms[0].Tier != "reasoning" {
		t.Errorf("the SDK's models.list() at /reasoning/v1: %+v (%+v); want OR1-Behemoth of tier reasoning alone", ms, calls[0].Error)
	}
	for _, c := range calls[1:3] {
		if c.Error != nil || c.Status != 200 || c.Tier != "reasoning" || c.Model != "OR1-Behemoth" || c.Content == "" {
			t.Errorf("the SDK's %s at /reasoning/v1: %+v (error %+v); want the reasoning tier's answer", c.Op, c, c.Error)
		}
	}
	if c := calls[3]; c.Error == nil || c.Error.Status != 400 || !strings.Contains(c.Error.Message, "served by tier fast") {
		t.Errorf("the SDK's %s at /reasoning/v1: %+v (error %+v); want its BadRequestError (400) naming the fast tier", c.Op, c, c.Error)
	}
	if err := node.StreamChat(w.url+"/reasoning", "OR1-Behemoth", 8, nil).Whole(8); err != nil {
		t.Errorf("the SDK streaming from /reasoning/v1: %v", err)
	}
}

// ids lists a /v1/models answer's ids, sorted, comma-separated.
func ids(body string) string {
	var doc struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.Unmarshal([]byte(body), &doc)
	var out []string
	for _, d := range doc.Data {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// TestE2EFrontCORSPreflightFromCurl: a browser's CORS preflight (OPTIONS
// with Origin and Access-Control-Request-Method) got 405 from the front
// door, where llama-server had answered it through nginx, so a web chat UI
// on another origin could not call it. With [front] cors_origins, an
// allowed origin's preflight gets what it asks for and the answer to its
// request says it may read it; any other origin gets no CORS header.
func TestE2EFrontCORSPreflightFromCurl(t *testing.T) {
	const origin = "https://chat.example.org"
	w := newDoorWorld(t, doorOpts{front: fmt.Sprintf("cors_origins = [%q]", origin)})
	w.ready(w.head("fast", "31", "qwen-a"))
	w.front()
	w.models("qwen-a")
	preflight := func(origin, path string) (int, http.Header) {
		code, hdr, body, err := curl("-X", "OPTIONS", "-H", "Origin: "+origin, "-H", "Access-Control-Request-Method: POST",
			"-H", "Access-Control-Request-Headers: authorization,content-type", w.url+path)
		if err != nil {
			t.Fatalf("preflight from %s: %v %q", origin, err, body)
		}
		return code, hdr
	}
	for _, path := range []string{"/v1/chat/completions", "/reasoning/v1/chat/completions"} {
		code, hdr := preflight(origin, path)
		if code != http.StatusNoContent || hdr.Get("Access-Control-Allow-Origin") != origin ||
			!strings.Contains(hdr.Get("Access-Control-Allow-Methods"), "POST") ||
			hdr.Get("Access-Control-Allow-Headers") != "authorization,content-type" {
			t.Errorf("preflight of %s from %s: %d %v; want 204 allowing POST with its headers", path, origin, code, hdr)
		}
	}
	if code, hdr := preflight("https://evil.example.com", "/v1/chat/completions"); code != http.StatusNoContent ||
		hdr.Get("Access-Control-Allow-Origin") != "" || hdr.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight from an origin not listed: %d %v; want 204 without CORS headers", code, hdr)
	}
	code, hdr, body, err := post(w.url+"/v1/chat/completions", chatBody("qwen-a"), "-H", "Origin: "+origin)
	if err != nil || code != 200 || hdr.Get("Access-Control-Allow-Origin") != origin ||
		!strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "X-LLM-Tier") {
		t.Errorf("the browser's request after its preflight: %d %v %.200q (%v); want the answer allowed to %s", code, hdr, body, err, origin)
	}
}

// TestE2ERefusedFilesWordsNeverReachClients: a cluster user's endpoint
// file whose heartbeat is `127.0.0.1:1; } server PWNED:80; #` is refused
// (it does not parse), and its parse error, quoting those words, was the
// tier's public 503 reason: nginx's 503 body (the watcher's
// unavailable-reasoning.json) and the front door's 503 put any text the
// user chose in front of every user of the tier. Both name the file and
// the rule it broke, never what it says; nginx's upstream files hold
// none of it either.
func TestE2ERefusedFilesWordsNeverReachClients(t *testing.T) {
	const words = "127.0.0.1:1; } server PWNED:80; #"
	w := newDoorWorld(t, doorOpts{nginx: true})
	file := fmt.Sprintf(`{"schema":%d,"tier":"reasoning","job_id":"41","host":"127.0.0.1","port":1,"state":"ready",
"models":["OR1-Behemoth"],"node":"node1","pid":1,"started_at":"2026-01-01T00:00:00Z","heartbeat":%q,
"lease_expires":"2099-01-01T00:00:00Z"}`, endpoints.SchemaVersion, words)
	if _, err := endpoints.Parse([]byte(file)); err == nil || !strings.Contains(err.Error(), "PWNED") {
		t.Fatalf("the file's own error does not quote its words (%v): the test would cross nothing", err)
	}
	if err := os.WriteFile(filepath.Join(w.eps, "reasoning-41.json"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	w.watch()
	w.front()
	nginx := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", w.nginx.Reasoning)
	var got string
	w.waitFor("nginx's 503 naming the refused file", 30*time.Second, func() bool {
		_, _, got, _ = post(nginx, chatBody("OR1-Behemoth"))
		return strings.Contains(got, "reasoning-41.json")
	})
	answers := map[string]string{"nginx :8081": got}
	for _, path := range []string{"/v1/chat/completions", "/reasoning/v1/chat/completions"} {
		code, hdr, body, err := post(w.url+path, chatBody("OR1-Behemoth"))
		if err != nil || code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Errorf("the front door's %s: %d %v %q (%v); want its 503 with Retry-After", path, code, hdr, body, err)
		}
		answers["the front door's "+path] = body
	}
	for who, body := range answers {
		t.Logf("%s: %s", who, strings.TrimSpace(body))
		if strings.Contains(body, "PWNED") || strings.Contains(body, "127.0.0.1:1") || strings.Contains(body, "server ") {
			t.Errorf("%s quotes the refused file: %s", who, body)
		}
		var doc struct{ Reason string }
		if err := json.Unmarshal([]byte(body), &doc); err != nil || !strings.Contains(doc.Reason, "reasoning-41.json") ||
			!strings.Contains(doc.Reason, "refused") {
			t.Errorf("%s: reason %q (%v); want the refused file named", who, doc.Reason, err)
		}
	}
	confs, _ := filepath.Glob(filepath.Join(w.nginx.Out, "*"))
	for _, f := range confs {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "PWNED") {
			t.Errorf("%s holds the file's words:\n%s", f, b)
		}
	}
}

// TestE2EFrontClientThatLeavesIsCancelled: a client that left mid-stream
// was logged outcome=answered or cut and counted as the head's
// mid-answer error (llm_front_upstream_errors_total{when="mid_answer"}),
// blaming a head that did nothing wrong. curl giving up (--max-time) and
// the OpenAI Node SDK abandoning a stream are each logged cancelled,
// nothing is counted against the head, and the answer is not continued
// elsewhere.
func TestE2EFrontClientThatLeavesIsCancelled(t *testing.T) {
	node := fronttest.NeedNode(t)
	w := newDoorWorld(t, doorOpts{})
	w.ready(w.head("fast", "51", "qwen-a", "--fake-tokens", "400", "--fake-token-rate", "40"))
	w.front()
	w.models("qwen-a")
	body := `{"model":"qwen-a","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"count"}]}`
	_, _, streamed, err := post(w.url+"/v1/chat/completions", body, "-N", "--max-time", "1.5")
	if err == nil || !strings.Contains(err.Error(), "exit status 28") || !strings.Contains(streamed, "tok3 ") {
		t.Fatalf("curl: %v after %q; want it to give up (exit 28) in the middle of the stream", err, tail([]byte(streamed), 200))
	}
	calls, err := node.Calls(w.url+"/v1", "abort:qwen-a:5")
	if err != nil || !calls[0].Aborted || calls[0].Chunks != 5 {
		t.Fatalf("the SDK's abandoned stream: %+v %v", calls, err)
	}
	for _, line := range w.accessLines("/v1/chat/completions", 2) {
		t.Logf("access log: %s", line)
		if !strings.Contains(line, " outcome=cancelled") || strings.Contains(line, "continued=") {
			t.Errorf("access line %q: want outcome=cancelled, not continued", line)
		}
	}
	if n := w.metric("llm_front_upstream_errors_total", `when="mid_answer"`); n != 0 {
		t.Errorf("llm_front_upstream_errors_total{when=\"mid_answer\"} = %v: the head was blamed for the clients leaving", n)
	}
	if n := w.metric("llm_front_requests_total", `outcome="cancelled"`); n != 2 {
		t.Errorf("llm_front_requests_total{outcome=\"cancelled\"} = %v, want 2", n)
	}
}

// TestE2EFrontWebUIInABrowser (issue 37): a browser at the front door's
// root URL gets the chat page a head serves (the fake's stand-in for
// llama-server's web UI), lists every tier's model (the merged /v1/models),
// and a message sent through it to the reasoning tier's model is answered;
// under /reasoning/ the page is the reasoning tier's. Headless Chromium
// driven by playwright-core: the test types and clicks, and reads the
// page's DOM; the screenshots are kept as artifacts (logged).
func TestE2EFrontWebUIInABrowser(t *testing.T) {
	browser := fronttest.NeedBrowser(t)
	w := newDoorWorld(t, doorOpts{})
	w.ready(w.head("fast", "31", "qwen-a"))
	w.ready(w.head("reasoning", "32", "OR1-Behemoth"))
	w.front()
	w.models("qwen-a", "OR1-Behemoth")
	artifacts := filepath.Join(os.TempDir(), "slurm-llm-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, model, props, shot string }{
		{"/", "OR1-Behemoth", "qwen-a", "webui-root.png"},
		{"/reasoning/", "OR1-Behemoth", "OR1-Behemoth", "webui-reasoning.png"},
	} {
		shot := filepath.Join(artifacts, tc.shot)
		got, err := browser.Chat(w.url+tc.path, tc.model, shot)
		t.Logf("%s: %+v (screenshot %s)", tc.path, got, shot)
		if err != nil {
			t.Errorf("the page at %s: %v", tc.path, err)
			continue
		}
		if tc.path == "/" && (!slices.Contains(got.Models, "qwen-a") || !slices.Contains(got.Models, "OR1-Behemoth")) {
			t.Errorf("the page at / lists %v; want every tier's model", got.Models)
		}
		if !strings.Contains(got.Props, tc.props) {
			t.Errorf("the page at %s was served by %q; want the head of %s", tc.path, got.Props, tc.props)
		}
		if got.Status != "1" || strings.TrimSpace(got.Answer) == "" {
			t.Errorf("the answer in the page at %s: status %q, %q; want a whole answer", tc.path, got.Status, got.Answer)
		}
		if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot at %s: %v", shot, err)
		}
	}
}
