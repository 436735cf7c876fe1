package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Fact 16: /health is 503 "Loading model" while loading, then 200.
func TestHeadHealthLoadingThenReady(t *testing.T) {
	_, base := startHead(t, "--fake-load-time", "2s")
	code, body := get(t, base+"/health")
	want := `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`
	if code != http.StatusServiceUnavailable || strings.TrimSpace(body) != want {
		t.Fatalf("health while loading = %d %s, want 503 %s", code, body, want)
	}
	if code, _ := get(t, base+"/v1/models"); code != http.StatusServiceUnavailable {
		t.Errorf("models while loading = %d, want 503", code)
	}
	waitReady(t, base)
	if _, body := get(t, base+"/health"); strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("health when ready = %s", body)
	}
}

// Fact 11: the head opens and closes short connections to each worker, then keeps one.
func TestHeadAttachesWorkers(t *testing.T) {
	w1, a1 := startWorker(t)
	w2, a2 := startWorker(t)
	head, base := startHead(t, "--rpc", a1+","+a2)
	waitReady(t, base)
	for _, w := range []*proc{w1, w2} {
		out := w.out.String()
		accepted := strings.Count(out, "Accepted client connection")
		closed := strings.Count(out, "Client connection closed")
		if accepted != shortConnections+1 || closed != shortConnections {
			t.Errorf("worker saw %d accepted, %d closed; want %d and %d",
				accepted, closed, shortConnections+1, shortConnections)
		}
	}
	head.waitLog(t, `I srv  llama_server: model loaded\n.* I srv  llama_server: listening on http://127\.0\.0\.1:\d+\n`)
}

// Measured 2026-11-23, Q4: a single-model head names its model by the first
// --alias (a comma list is allowed), else by the -m argument exactly as given
// (full path with .gguf, not the base name), in models[].name and .model and
// in data[].id; data[].aliases lists every alias, or that path.
func TestModels(t *testing.T) {
	type names struct{ Name, Model, ID string }
	tests := []struct {
		name        string
		args        []string
		want        names
		wantAliases []string
	}{
		{name: "no alias: -m as given", args: []string{"-m", "/models/qwen-7b.gguf"},
			want:        names{"/models/qwen-7b.gguf", "/models/qwen-7b.gguf", "/models/qwen-7b.gguf"},
			wantAliases: []string{"/models/qwen-7b.gguf"}},
		{name: "relative -m as given", args: []string{"-m", "models/q.gguf"},
			want: names{"models/q.gguf", "models/q.gguf", "models/q.gguf"}, wantAliases: []string{"models/q.gguf"}},
		{name: "alias wins", args: []string{"-m", "/models/q.gguf", "--alias", "fast"},
			want: names{"fast", "fast", "fast"}, wantAliases: []string{"fast"}},
		{name: "comma list: the first alias", args: []string{"-m", "/models/q.gguf", "--alias", "OR1-Behemoth,or1"},
			want:        names{"OR1-Behemoth", "OR1-Behemoth", "OR1-Behemoth"},
			wantAliases: []string{"OR1-Behemoth", "or1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, base := startHead(t, tt.args...)
			waitReady(t, base)
			_, body := get(t, base+"/v1/models")
			var got struct {
				Object string
				Models []struct{ Name, Model string }
				Data   []struct {
					ID      string
					Aliases []string
				}
			}
			decodeJSON(t, body, &got)
			if len(got.Models) != 1 || len(got.Data) != 1 {
				t.Fatalf("/v1/models = %s, want one model in each list", body)
			}
			gotNames := names{got.Models[0].Name, got.Models[0].Model, got.Data[0].ID}
			if d := cmp.Diff(tt.want, gotNames); d != "" {
				t.Errorf("models[].name, models[].model, data[].id (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantAliases, got.Data[0].Aliases); d != "" {
				t.Errorf("data[].aliases (-want +got):\n%s", d)
			}
		})
	}
}

// Measured 2026-11-23, Q4: a single-model head does not check a request's
// "model": any name, an empty one or none is served (200), and every reply,
// streamed or not, names the served model (the first alias).
func TestRequestModelNotChecked(t *testing.T) {
	_, base := startHead(t, "-m", "/models/q.gguf", "--alias", "OR1-Behemoth,or1", "--fake-tokens", "2",
		"--fake-token-rate", "0")
	waitReady(t, base)
	tests := []struct{ name, path, body string }{
		{name: "chat, the alias", path: "/v1/chat/completions", body: `{"model":"OR1-Behemoth","messages":[]}`},
		{name: "chat, the second alias", path: "/v1/chat/completions", body: `{"model":"or1","messages":[]}`},
		{name: "chat, another name", path: "/v1/chat/completions", body: `{"model":"other-name","messages":[]}`},
		{name: "chat, empty name", path: "/v1/chat/completions", body: `{"model":"","messages":[]}`},
		{name: "chat streamed, another name", path: "/v1/chat/completions",
			body: `{"model":"zzz","stream":true,"messages":[]}`},
		{name: "completion, no model", path: "/completion", body: `{"prompt":"hi"}`},
		{name: "completion streamed, another name", path: "/completion",
			body: `{"model":"zzz","prompt":"hi","stream":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Post(base+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatalf("post: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200", resp.StatusCode)
			}
			var bodies []string
			if resp.Header.Get("Content-Type") == "text/event-stream" {
				err = sseEvents(resp.Body, func(d string) { bodies = append(bodies, d) })
			} else {
				b, rerr := io.ReadAll(resp.Body)
				bodies, err = []string{string(b)}, rerr
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var models []string
			for _, b := range bodies {
				var v struct{ Model *string }
				if b == "[DONE]" || json.Unmarshal([]byte(b), &v) != nil || v.Model == nil {
					continue
				}
				models = append(models, *v.Model)
			}
			if len(models) == 0 {
				t.Fatalf("no reply names a model: %q", bodies)
			}
			for _, m := range models {
				if m != "OR1-Behemoth" {
					t.Errorf("reply names model %q, want OR1-Behemoth (the first alias): %q", m, bodies)
					break
				}
			}
		})
	}
}

func TestChatNonStreamed(t *testing.T) {
	_, addr := startWorker(t)
	_, base := startHead(t, "--rpc", addr, "--alias", "m", "--fake-tokens", "4", "--fake-token-rate", "0")
	waitReady(t, base)
	resp, err := postChat(base, `{"messages":[{"role":"user","content":"say hi"}]}`)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got struct {
		Object  string
		Model   string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	decodeJSON(t, string(body), &got)
	if got.Object != "chat.completion" || got.Model != "m" || len(got.Choices) != 1 {
		t.Fatalf("response = %s", body)
	}
	want := "tok0 tok1 tok2 tok3 "
	if d := cmp.Diff(want, got.Choices[0].Message.Content); d != "" {
		t.Errorf("content (-want +got):\n%s", d)
	}
	if got.Usage.CompletionTokens != 4 {
		t.Errorf("completion_tokens = %d, want 4", got.Usage.CompletionTokens)
	}
}

func TestChatStreamed(t *testing.T) {
	_, addr := startWorker(t)
	_, base := startHead(t, "--rpc", addr, "--fake-tokens", "10", "--fake-token-rate", "100")
	waitReady(t, base)
	began := time.Now()
	resp, err := postChat(base, `{"stream":true,"max_tokens":5,"messages":[]}`)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type = %q", ct)
	}
	var events []string
	if err := sseEvents(resp.Body, func(d string) { events = append(events, d) }); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	// role chunk, 5 token chunks (max_tokens < --fake-tokens), finish chunk, [DONE]
	if len(events) != 8 || events[7] != "[DONE]" || !strings.Contains(events[6], `"finish_reason":"length"`) {
		t.Fatalf("events = %q", events)
	}
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Errorf("5 tokens at 100/s took %v, want at least 40ms (token rate not applied)", took)
	}
}

// Fact 13: a worker killed while the head is idle: /health stays 200; the next request
// gets an empty reply and the head dies of SIGABRT (134) naming the cause.
func TestWorkerKilledWhileIdle(t *testing.T) {
	w, addr := startWorker(t)
	head, base := startHead(t, "--rpc", addr)
	waitReady(t, base)
	w.signal(t, syscall.SIGKILL)
	w.waitExit(t)
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Fatalf("health after worker death = %d, want 200 (the head does not notice)", code)
	}
	resp, err := postChat(base, `{"messages":[]}`)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("request after worker death answered %d, want an empty reply", resp.StatusCode)
	}
	if sig := head.killedBy(t); sig != syscall.SIGABRT {
		t.Errorf("head ended by signal %d, want SIGABRT (status 134)", sig)
	}
	head.waitLog(t, `Remote RPC server crashed or returned malformed response`)
}

// Fact 14: after the head's crash, the surviving worker accepts a new head.
func TestSurvivingWorkerAcceptsNewHead(t *testing.T) {
	_, a1 := startWorker(t)
	w2, a2 := startWorker(t)
	head, base := startHead(t, "--rpc", a1+","+a2)
	waitReady(t, base)
	w2.signal(t, syscall.SIGKILL)
	w2.waitExit(t)
	if resp, err := postChat(base, `{"messages":[]}`); err == nil {
		resp.Body.Close()
	}
	if sig := head.killedBy(t); sig != syscall.SIGABRT {
		t.Fatalf("head ended by signal %d, want SIGABRT (status 134)", sig)
	}
	_, a2new := startWorker(t)
	_, base2 := startHead(t, "--rpc", a1+","+a2new, "--fake-tokens", "2")
	waitReady(t, base2)
	resp, err := postChat(base2, `{"messages":[]}`)
	if err != nil {
		t.Fatalf("new head request: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("new head request = %d, want 200", resp.StatusCode)
	}
}

// startStream posts a streamed request and returns once the first chunk arrived.
func startStream(t *testing.T, base string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := postChat(base, `{"stream":true,"messages":[]}`)
	if err != nil {
		t.Fatalf("post stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	return resp, r
}

// Fact 18: a worker dying mid-stream: the stream breaks without [DONE] and the head
// dies of SIGABRT.
func TestWorkerKilledMidStream(t *testing.T) {
	w, addr := startWorker(t)
	head, base := startHead(t, "--rpc", addr, "--fake-tokens", "100000", "--fake-token-rate", "50")
	waitReady(t, base)
	_, stream := startStream(t, base)
	w.signal(t, syscall.SIGKILL)
	rest, _ := io.ReadAll(stream)
	if strings.Contains(string(rest), "[DONE]") {
		t.Errorf("stream ended with [DONE] after its worker died")
	}
	if sig := head.killedBy(t); sig != syscall.SIGABRT {
		t.Errorf("head ended by signal %d, want SIGABRT (status 134)", sig)
	}
}

// llama-server's own /completion: `content` and `stop`; streamed without [DONE].
func TestRawCompletion(t *testing.T) {
	_, base := startHead(t, "--fake-tokens", "3", "--fake-token-rate", "0")
	waitReady(t, base)
	tests := []struct {
		name string
		body string
		want []string
	}{
		{name: "whole", body: `{"prompt":"hi","n_predict":2}`,
			want: []string{`{"content":"tok0 tok1 ","model":"fake-model","stop":true,"stop_type":"limit","timings":{"predicted_n":2,"prompt_n":1},"tokens_evaluated":1,"tokens_predicted":2}`}},
		{name: "streamed", body: `{"prompt":"hi","stream":true}`,
			want: []string{`{"content":"tok0 ","id_slot":-1,"index":0,"stop":false,"tokens":[1000000],"tokens_evaluated":1,"tokens_predicted":1}`,
				`{"content":"tok1 ","id_slot":-1,"index":0,"stop":false,"tokens":[1000001],"tokens_evaluated":1,"tokens_predicted":2}`,
				`{"content":"tok2 ","id_slot":-1,"index":0,"stop":false,"tokens":[1000002],"tokens_evaluated":1,"tokens_predicted":3}`,
				`{"content":"","model":"fake-model","stop":true,"stop_type":"limit","timings":{"predicted_n":3,"prompt_n":1},"tokens_evaluated":1,"tokens_predicted":3}`}},
		// a prompt of a string and the fake's own ids (Q14) goes on from
		// them; its slot holds "hi" and the streamed answer: 1 evaluated
		{name: "mixed prompt", body: `{"prompt":["hi ",1000000,1000001],"n_predict":1,"stream":true}`,
			want: []string{`{"content":"tok2 ","id_slot":-1,"index":0,"stop":false,"tokens":[1000002],"tokens_evaluated":3,"tokens_predicted":1}`,
				`{"content":"","model":"fake-model","stop":true,"stop_type":"limit","timings":{"predicted_n":1,"prompt_n":1},"tokens_evaluated":3,"tokens_predicted":1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.Post(base+"/completion", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatalf("post: %v", err)
			}
			defer resp.Body.Close()
			var got []string
			if resp.Header.Get("Content-Type") == "text/event-stream" {
				err = sseEvents(resp.Body, func(d string) { got = append(got, d) })
			} else {
				b, rerr := io.ReadAll(resp.Body)
				got, err = []string{strings.TrimSpace(string(b))}, rerr
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("events (-want +got):\n%s", d)
			}
		})
	}
}

// Measured 2026-11-24 (Q8): a chat request whose last message is the
// assistant's continues it. Implicitly (the server's default prefill) the
// answer repeats the prefill, in the first content delta; explicitly
// (continue_final_message, add_generation_prompt false) it does not. The
// fake numbers the new tokens on from the prefill's words. Each answer has
// its own id; usage comes in a chunk of its own when asked for, and counts
// the new tokens only.
func TestChatContinuation(t *testing.T) {
	_, base := startHead(t, "--alias", "m", "--fake-tokens", "3", "--fake-token-rate", "0")
	waitReady(t, base)
	stream := func(body string) []string {
		t.Helper()
		resp, err := postChat(base, body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var deltas []string
		if err := sseEvents(resp.Body, func(d string) {
			var c struct {
				ID      string `json:"id"`
				Choices []struct {
					Delta        map[string]any `json:"delta"`
					FinishReason *string        `json:"finish_reason"`
				} `json:"choices"`
				Usage map[string]int `json:"usage"`
			}
			switch {
			case d == "[DONE]":
				deltas = append(deltas, d)
			case json.Unmarshal([]byte(d), &c) != nil:
				t.Errorf("event %q", d)
			case len(c.Choices) == 0:
				deltas = append(deltas, fmt.Sprintf("usage %d", c.Usage["completion_tokens"]))
			case c.Choices[0].FinishReason != nil:
				deltas = append(deltas, "finish "+*c.Choices[0].FinishReason)
			case c.Choices[0].Delta["role"] != nil:
				deltas = append(deltas, fmt.Sprintf("role %v", c.Choices[0].Delta["content"]))
			default:
				deltas = append(deltas, fmt.Sprint(c.Choices[0].Delta["content"]))
			}
		}); err != nil {
			t.Fatal(err)
		}
		return deltas
	}
	msgs := `"messages":[{"role":"user","content":"count"},{"role":"assistant","content":"tok0 tok1 "}]`
	if d := cmp.Diff([]string{"role <nil>", "tok0 tok1 tok2 ", "tok3 ", "tok4 ", "finish length", "[DONE]"},
		stream(`{"stream":true,`+msgs+`}`)); d != "" {
		t.Errorf("implicit continuation (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"role <nil>", "tok2 ", "tok3 ", "tok4 ", "finish length", "usage 3", "[DONE]"},
		stream(`{"stream":true,"stream_options":{"include_usage":true},"continue_final_message":true,"add_generation_prompt":false,`+msgs+`}`)); d != "" {
		t.Errorf("explicit continuation (-want +got):\n%s", d)
	}
	for _, bad := range []string{
		`{"continue_final_message":true,` + msgs + `}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"a"},{"role":"assistant","content":"b"}]}`,
	} {
		resp, err := postChat(base, bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400 as real llama-server", bad, resp.StatusCode)
		}
	}
	ids := map[string]bool{}
	for i := 0; i < 2; i++ {
		resp, err := postChat(base, `{"messages":[]}`)
		if err != nil {
			t.Fatal(err)
		}
		var c struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		ids[c.ID] = strings.HasPrefix(c.ID, "chatcmpl-") && len(c.ID) == len("chatcmpl-")+32
	}
	if len(ids) != 2 {
		t.Errorf("ids %v: want two different chatcmpl- ids", ids)
	}
}

// /completion continues a prompt that ends in the fake's own tokens.
func TestRawCompletionContinues(t *testing.T) {
	_, base := startHead(t, "--fake-tokens", "2", "--fake-token-rate", "0")
	waitReady(t, base)
	resp, err := http.Post(base+"/completion", "application/json", strings.NewReader(`{"prompt":"count tok0 tok1 tok2 "}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Content != "tok3 tok4 " {
		t.Errorf("content %q (%v), want the numbering continued", got.Content, err)
	}
}

// A request with Expect: 100-continue gets 100 Continue at once, before the
// head's real answer and whatever that is (cpp-httplib answers it before
// routing, so before llama-server's loading check; slurm-facts 34): while
// loading the 503 comes after it, once loaded the answer.
func TestHeadAnswersExpectContinueFirst(t *testing.T) {
	_, base := startHead(t, "--fake-load-time", "1h", "--alias", "m")
	_, ready := startHead(t, "--alias", "m")
	waitReady(t, ready)
	for _, tc := range []struct {
		name, base string
		want       int
	}{{"loading", base, http.StatusServiceUnavailable}, {"loaded", ready, http.StatusOK}} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(tc.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(waitTimeout))
		body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
		br := bufio.NewReader(conn)
		line, err := br.ReadString('\n') // before any byte of the body was sent
		if err != nil || strings.TrimSpace(line) != "HTTP/1.1 100 Continue" {
			t.Fatalf("%s: first line %q (%v), want HTTP/1.1 100 Continue", tc.name, line, err)
		}
		if _, err := br.ReadString('\n'); err != nil { // the 100's empty line
			t.Fatal(err)
		}
		io.WriteString(conn, body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: the answer after 100 Continue is %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}
