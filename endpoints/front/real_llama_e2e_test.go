//go:build e2e

package front

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/front/fronttest"
	"slurm-llm/endpoints/tiers"
)

// The real llama.cpp lane of the front door (make e2e-real): what the fake
// copies of llama-server's answers (cmd/fake-llama/FACTS.md) checked through
// the front door against llama.cpp's own llama-server. It runs when
// LLAMA_BIN names a build (shared/tools/real-llama) and LLAMA_MODEL (or
// TINY_MODEL) a model; it is skipped otherwise (CI has no llama.cpp).

// realServer is one llama-server on loopback, killed by PID when its test
// ends.
type realServer struct {
	addr  string
	alias string
}

// startRealServer starts llama-server with the lane's model under alias,
// with args, and waits until /health answers 200.
func startRealServer(t testing.TB, alias string, args ...string) *realServer {
	t.Helper()
	bin, model := faketest.NeedReal(t, "llama-server")
	exe := filepath.Join(bin, "llama-server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &realServer{addr: "127.0.0.1:" + strconv.Itoa(port), alias: alias}
	argv := append([]string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--alias", s.alias,
		"-c", "2048", "-np", "2", "--metrics", "--no-warmup"}, args...)
	cmd := exec.Command(exe, argv...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(t.TempDir(), "llama-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("llama-server never became healthy: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// routeReal feeds the front door a pass routing each tier to its real
// servers (all ready and live).
func (r *rig) routeReal(byTier map[string][]*realServer) {
	now := time.Now()
	rep := tiers.Report{Time: now, Live: map[string][]endpoints.Server{}}
	job := 0
	for _, tier := range slices.Sorted(maps.Keys(byTier)) {
		for _, s := range byTier[tier] {
			job++
			addHead(&rep, tier, strconv.Itoa(job), s.addr, []string{s.alias}, now)
		}
		rep.Views = append(rep.Views, tiers.TierView{Tier: tier, State: tiers.StateRouted, Reason: tiers.ReasonRouted})
	}
	r.s.Update(rep)
}

// TestE2ERealLlamaCodeCompletion: /completion, /completions and /infill,
// streamed and whole, through the front door to a real llama-server (issue
// 37, defect 1; FACTS.md Q10): each answer ends as llama-server ends it
// (streamed: a last event with "stop": true and no [DONE]; whole: one
// object with its counts), never with the front door's "cut" event; the
// access log says answered; the completion tokens counted are the head's
// tokens_predicted; the head is not marked failing. The lane's tiny model
// has no FIM tokens: /infill runs with them given as overrides of the
// model's metadata (token ids 100, 101, 102 of its vocabulary), as a
// FIM-capable model has them.
func TestE2ERealLlamaCodeCompletion(t *testing.T) {
	s := startRealServer(t, "tiny", "--override-kv", "tokenizer.ggml.fim_pre_token_id=int:100",
		"--override-kv", "tokenizer.ggml.fim_suf_token_id=int:101",
		"--override-kv", "tokenizer.ggml.fim_mid_token_id=int:102")
	for _, path := range []string{"/completion", "/completions", "/infill"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				r := newRig(t, nil)
				r.routeReal(map[string][]*realServer{"fast": {s}})
				body := fmt.Sprintf(`{"model":%q,"stream":%v,"prompt":"hello there","input_prefix":"def f(","input_suffix":"):",`+
					`"n_predict":6,"grammar":"root ::= [a-z ]+"}`, s.alias, stream)
				code, answer := r.streamRawBody(path, body)
				if code != http.StatusOK || strings.Contains(answer, `"code":502`) {
					t.Fatalf("%d %s", code, answer)
				}
				predicted := realPredicted(t, answer, stream)
				waitFor(t, "the access line", func() bool { return strings.Contains(r.accessLog(), "outcome=") })
				if line := r.accessLog(); !strings.Contains(line, "outcome=answered") {
					t.Errorf("access log: want outcome=answered:\n%s", line)
				}
				got := testutil.ToFloat64(r.s.metrics.tokens.WithLabelValues("fast", s.alias, "completion"))
				if predicted == 0 || got != float64(predicted) {
					t.Errorf("completion tokens counted %v, the head's tokens_predicted %d", got, predicted)
				}
				if r.s.tab.Load().heads["fast"][0].failing(r.s.now()) {
					t.Errorf("the head is marked failing after an answer that ended as llama-server ends it")
				}
			})
		}
	}
}

// realPredicted checks that answer is llama-server's own shape, streamed
// (events, the last with "stop": true and the counts, no [DONE]) or whole,
// and returns its tokens_predicted.
func realPredicted(t *testing.T, answer string, stream bool) int {
	t.Helper()
	type counts struct {
		Content   *string `json:"content"`
		Stop      bool    `json:"stop"`
		Predicted int     `json:"tokens_predicted"`
	}
	if !stream {
		var c counts
		if err := json.Unmarshal([]byte(answer), &c); err != nil || c.Content == nil {
			t.Fatalf("whole answer is not llama-server's object (%v): %s", err, answer)
		}
		return c.Predicted
	}
	if strings.Contains(answer, "[DONE]") {
		t.Errorf("a stream of llama-server's own events ended with [DONE]:\n%s", answer)
	}
	events, err := sseEvents(strings.NewReader(answer))
	if err != nil || len(events) == 0 {
		t.Fatalf("stream: %v: %s", err, answer)
	}
	var last counts
	if err := json.Unmarshal([]byte(events[len(events)-1]), &last); err != nil || !last.Stop {
		t.Fatalf("the last event is not llama-server's stop event (%v): %s", err, events[len(events)-1])
	}
	return last.Predicted
}

// TestE2ERealLlamaWebUI: llama-server's own chat UI (the build's, tools/ui)
// opened through the front door in a real browser (headless Chromium),
// used as a person uses it, with two tiers each served by a real
// llama-server: the page at the root URL loads with every file it asks
// (none answered 404 or 5xx: the files llama-server registers change from
// build to build, FACTS.md Q11), takes the front door for llama-server's
// router (it asks /models/sse), lists both tiers' models in its picker;
// the person picks the reasoning tier's model, and the message reaches
// that tier's head and its answer shows. The server's features it asks
// for and the front door refuses (/tools) are answered as a head with them
// off answers. A screenshot is saved as an artifact; the test reads the
// answers and the text.
func TestE2ERealLlamaWebUI(t *testing.T) {
	browser := fronttest.NeedBrowser(t)
	fast := startRealServer(t, "tiny-fast", "-n", "12")
	reasoning := startRealServer(t, "tiny-reasoning", "-n", "12")
	r := newRig(t, nil)
	r.routeReal(map[string][]*realServer{"fast": {fast}, "reasoning": {reasoning}})
	artifacts := filepath.Join(os.TempDir(), "slurm-llm-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "real-webui.png")
	got, err := browser.Use(r.srv.URL+"/", reasoning.alias, "hello from a browser", shot)
	t.Logf("answers %v, errors %v (screenshot %s)", got.Responses, got.Errors, shot)
	if err != nil {
		t.Fatalf("the page: %v (the picker showed %q)", err, got.Listed)
	}
	chat, feed := false, false
	for _, line := range got.Responses {
		f := strings.Fields(line)
		code, _ := strconv.Atoi(f[len(f)-1])
		switch {
		case code >= 500 || code == http.StatusNotFound:
			t.Errorf("the page got %s", line)
		case line == "POST /v1/chat/completions 200":
			chat = true
		case line == "GET /models/sse 200":
			feed = true
		}
	}
	if !chat {
		t.Errorf("the page's chat request was not answered 200; the access log:\n%s", r.accessLog())
	}
	if !feed {
		t.Errorf("the page did not take the front door for a router (no /models/sse)")
	}
	if !strings.Contains(got.Listed, fast.alias) || !strings.Contains(got.Listed, reasoning.alias) {
		t.Errorf("the picker does not list both tiers' models:\n%s", got.Listed)
	}
	if got.ChatModel != reasoning.alias {
		t.Errorf("the chat request named %q; want the model picked, %q", got.ChatModel, reasoning.alias)
	}
	if log := r.accessLog(); !strings.Contains(log, `path="/v1/chat/completions" status=200 tier=reasoning`) {
		t.Errorf("the chat did not reach the reasoning tier:\n%s", log)
	}
	if !strings.Contains(got.Text, "hello from a browser") {
		t.Errorf("the page does not show the message:\n%s", got.Text)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Errorf("no screenshot at %s: %v", shot, err)
	}
}

// BenchmarkE2ERealConversationAffinity (issue 39, item 3; make
// bench-real): a 5-turn conversation through the front door to three real
// llama-servers of one tier (-np 1), each turn adding a user message of
// about 250 tokens (about 1,500 in all) and an 8-token answer (llama.cpp's /completion with the
// conversation as its prompt, which keys it by its first 512 bytes, and a
// grammar: the random model's chat trips llama-server's output parser),
// with affinity (affinity_ttl 30m) and without (0s: the least loaded head,
// ties round the heads), and the same conversation on one head alone. It
// reports each mode's turn-5 latency and how many prompt tokens the head
// evaluated for it (timings.prompt_n: only the new turn when the head
// holds the conversation, more when it last saw an earlier turn).
func BenchmarkE2ERealConversationAffinity(b *testing.B) {
	var servers []*realServer
	for i := 0; i < 3; i++ {
		servers = append(servers, startRealServer(b, "tiny", "-c", "4096", "-np", "1"))
	}
	system := strings.Repeat("The cluster shares its GPUs with science jobs, which always win them. ", 10)
	doc := strings.Repeat("A tier is kept queued by the keeper and preempted by science; its stream is continued. ", 12)
	run := func(ttl time.Duration, heads []*realServer, round int) (time.Duration, int) {
		r := newRig(b, func(c *Config) { c.AffinityTTL = ttl })
		r.routeReal(map[string][]*realServer{"fast": heads})
		prompt := fmt.Sprintf("Round %d. %s", round, system)
		var last time.Duration
		var promptN int
		for turn := 1; turn <= 5; turn++ {
			prompt += fmt.Sprintf("\nUser: %s Question %d?\nAssistant:", doc, turn)
			body, _ := json.Marshal(map[string]any{"model": "tiny", "prompt": prompt, "n_predict": 8,
				"grammar": "root ::= [a-z ]+", "cache_prompt": true})
			start := time.Now()
			resp, err := http.Post(r.srv.URL+"/completion", "application/json", strings.NewReader(string(body)))
			if err != nil {
				b.Fatal(err)
			}
			var ans struct {
				Content string `json:"content"`
				Timings struct {
					PromptN int `json:"prompt_n"`
				} `json:"timings"`
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := json.Unmarshal(raw, &ans); err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("turn %d: %d %v: %s", turn, resp.StatusCode, err, raw)
			}
			last, promptN = time.Since(start), ans.Timings.PromptN
			prompt += " " + ans.Content
		}
		return last, promptN
	}
	type mode struct {
		name  string
		ttl   time.Duration
		heads []*realServer
	}
	modes := []mode{{"one_head", 0, servers[:1]}, {"affinity", 30 * time.Minute, servers}, {"least_loaded", 0, servers}}
	for i := 0; i < b.N; i++ {
		for j, m := range modes {
			d, n := run(m.ttl, m.heads, i*len(modes)+j)
			b.ReportMetric(float64(d.Microseconds())/1000, "turn5_ms_"+m.name)
			b.ReportMetric(float64(n), "turn5_prompt_n_"+m.name)
			b.Logf("%s: turn 5 answered in %v, %d prompt tokens evaluated", m.name, d, n)
		}
	}
}
