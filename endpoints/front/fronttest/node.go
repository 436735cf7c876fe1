package fronttest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// OpenAINode is the version of the official OpenAI Node SDK (npm package
// "openai") the harness installs: the 4.x line runs on Debian 12's
// nodejs 18 (5.x and later want a newer node).
const OpenAINode = "4.104.0"

//go:embed testdata/openai_stream.mjs
var openaiStream []byte

//go:embed testdata/openai_calls.mjs
var openaiCalls []byte

// Node streams chat completions through the official OpenAI Node SDK, the
// client most users of an OpenAI URL have: a script (testdata/
// openai_stream.mjs) run by node, the package installed by npm into a
// cache directory outside the repository (never committed).
type Node struct {
	node   string // the node binary
	script string // the script, in the directory holding node_modules/openai
	calls  string // testdata/openai_calls.mjs, beside it
}

// NeedNode returns the harness, installing the SDK at its first use on
// this machine. Without node or npm the test is skipped with a message
// saying what to install, except under CI (CI set), where it fails:
// .ci/run installs them.
func NeedNode(t testing.TB) *Node {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + ": the OpenAI Node SDK check needs node and npm (Debian: apt-get install nodejs npm)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("no npm")
	}
	dir, err := installOpenAI(npm)
	if err != nil {
		missing(err.Error())
	}
	n := &Node{node: node, script: filepath.Join(dir, "openai_stream.mjs"), calls: filepath.Join(dir, "openai_calls.mjs")}
	for path, want := range map[string][]byte{n.script: openaiStream, n.calls: openaiCalls} {
		if b, _ := os.ReadFile(path); !bytes.Equal(b, want) {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return n
}

// installOpenAI installs the SDK into the user's cache once (installNpm)
// and returns that directory.
func installOpenAI(npm string) (string, error) { return installNpm(npm, "openai", OpenAINode) }

// StreamChat streams one chat completion for model from base (the front
// door's root URL) through the SDK and reads it to its end, as
// fronttest.StreamChat does over HTTP: the SDK's chunks are the stream's
// events, its normal end is Done, an error it throws (an in-stream error
// event, a failed request) is ErrEvent. The SDK shows no SSE comments.
// progress, if set, gets the token count as it grows.
func (n *Node) StreamChat(base, model string, maxTokens int, progress func(int)) Seen {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.node, n.script, base, model, fmt.Sprint(maxTokens))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	s := Seen{IDs: map[string]bool{}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.Err = err
		return s
	}
	if err := cmd.Start(); err != nil {
		s.Err = fmt.Errorf("start node: %w", err)
		return s
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := time.Now()
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, `{"end":`) {
			s.Done = true
			continue
		}
		if err := s.event(line, &last, progress); err != nil {
			s.Err = err
			break
		}
	}
	werr := cmd.Wait()
	if s.Err == nil && werr != nil && s.ErrEvent == "" {
		s.Err = fmt.Errorf("node: %w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return s
}

// CurlStream streams one chat completion for model from base with curl
// (-N: no buffering), reading its output as fronttest.StreamChat does.
func CurlStream(base, model string, maxTokens int, progress func(int)) Seen {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var s Seen
	err := Curl(ctx, base+"/v1/chat/completions", []byte(ChatBody(model, maxTokens)), func(out io.Reader) error {
		s = ReadSSE(out, progress)
		return s.Err
	})
	if s.IDs == nil {
		s.IDs = map[string]bool{}
	}
	if err != nil && s.Err == nil {
		s.Err = err
	}
	return s
}

// Curl posts body (JSON) to url with curl, as a client would (-N: no
// buffering), and hands its output to read as it comes; the error is
// read's, or curl's with what it said.
func Curl(ctx context.Context, url string, body []byte, read func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "curl", "-sS", "-N", "-H", "Content-Type: application/json", "--data-binary", "@-", url)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start curl: %w", err)
	}
	rerr := read(out)
	_, _ = io.Copy(io.Discard, out) // what read left, so that curl can end
	if err := cmd.Wait(); err != nil && rerr == nil {
		return fmt.Errorf("curl: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return rerr
}

// Call is what one call through the SDK gave (testdata/openai_calls.mjs):
// Op is the call as asked; Models the list (models); Status, Tier (the
// answer's X-LLM-Tier), Model and Content a chat completion's (chat:MODEL);
// Chunks how many a stream gave before it was abandoned (abort:MODEL:N);
// Error what the SDK threw, if it did.
type Call struct {
	Op     string `json:"op"`
	Models []struct {
		ID   string `json:"id"`
		Tier string `json:"tier"`
	} `json:"models"`
	Status  int    `json:"status"`
	Tier    string `json:"tier"`
	Model   string `json:"model"`
	Content string `json:"content"`
	Chunks  int    `json:"chunks"`
	Aborted bool   `json:"aborted"`
	Error   *struct {
		Message string `json:"message"`
		Name    string `json:"name"`
		Status  int    `json:"status"`
	} `json:"error"`
}

// Calls runs ops through the SDK configured with baseURL, as a user sets
// it (http://HOST:PORT/v1, or a tier's http://HOST:PORT/reasoning/v1), one
// after the other, and returns what each gave: "models" lists the models,
// "chat:MODEL" asks one chat completion, "abort:MODEL:N" streams one and
// abandons it after N chunks.
func (n *Node) Calls(baseURL string, ops ...string) ([]Call, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.node, append([]string{n.calls, baseURL}, ops...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node openai_calls.mjs: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var calls []Call
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("node openai_calls.mjs: line %q: %w", line, err)
		}
		calls = append(calls, c)
	}
	if len(calls) != len(ops) {
		return calls, fmt.Errorf("node openai_calls.mjs: %d answers to %d calls: %s", len(calls), len(ops), out)
	}
	return calls, nil
}
