package fronttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"testing"
)

// sseHead answers every chat request with n numbered tokens as the fake
// llama.cpp streams them, then an error event (failAt > 0: after failAt
// tokens, as real llama-server ends an answer its parser refused) or a
// finish and [DONE].
func sseHead(t *testing.T, n, failAt int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); w.(http.Flusher).Flush() }
		chunk := func(delta, finish string) string {
			return fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, delta, finish)
		}
		send(chunk(`{"role":"assistant","content":null}`, "null"))
		for i := range n {
			if failAt > 0 && i == failAt {
				send(`{"error":{"code":500,"message":"the model produced output that does not match","type":"server_error"}}`)
				return
			}
			send(chunk(fmt.Sprintf(`{"content":"tok%d "}`, i), "null"))
		}
		send(chunk(`{}`, `"stop"`))
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The harness reads a whole answer through the OpenAI Node SDK, and an
// in-stream error event comes out as the error the SDK throws (slurm-facts
// 36).
func TestNodeSDKStream(t *testing.T) {
	node := NeedNode(t)
	whole := node.StreamChat(sseHead(t, 5, 0).URL, "m", 5, nil)
	if err := whole.Whole(5); err != nil {
		t.Errorf("a whole answer through the SDK: %v", err)
	}
	failed := node.StreamChat(sseHead(t, 5, 2).URL, "m", 5, nil)
	if !strings.Contains(failed.ErrEvent, "does not match") || failed.Done || len(failed.Tokens) != 2 {
		t.Errorf("an error event through the SDK: error %q, done %v, tokens %v; want the event's message, not done, 2 tokens",
			failed.ErrEvent, failed.Done, failed.Tokens)
	}
}

func TestCurlStream(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	if err := CurlStream(sseHead(t, 5, 0).URL, "m", 5, nil).Whole(5); err != nil {
		t.Errorf("a whole answer through curl: %v", err)
	}
}

// The harness's calls through the SDK: the models listed, a chat answer
// with its X-LLM-Tier, a refusal as the error the SDK throws, a stream
// abandoned after its chunks.
func TestNodeSDKCalls(t *testing.T) {
	node := NeedNode(t)
	stream := sseHead(t, 50, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-LLM-Tier", "reasoning")
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(body, &req)
		switch {
		case r.URL.Path == "/x/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"big","object":"model","tier":"reasoning"}]}`)
		case req.Stream:
			r.URL.Path = "/v1/chat/completions"
			(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
				u, _ := url.Parse(stream.URL)
				pr.SetURL(u)
				pr.Out.Body, pr.Out.ContentLength = io.NopCloser(strings.NewReader(string(body))), int64(len(body))
			}}).ServeHTTP(w, r)
		case req.Model == "big":
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"big","choices":[{"index":0,"message":{"role":"assistant","content":"tok0 "},"finish_reason":"stop"}]}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"not this tier's model","type":"invalid_request_error","code":400}}`)
		}
	}))
	t.Cleanup(srv.Close)
	calls, err := node.Calls(srv.URL+"/x/v1", "models", "chat:big", "chat:small", "abort:big:3")
	if err != nil {
		t.Fatal(err)
	}
	if m := calls[0].Models; len(m) != 1 || m[0].ID != "big" || m[0].Tier != "reasoning" {
		t.Errorf("models: %+v", m)
	}
	if c := calls[1]; c.Status != 200 || c.Tier != "reasoning" || c.Model != "big" || c.Content != "tok0 " || c.Error != nil {
		t.Errorf("chat: %+v", c)
	}
	if c := calls[2]; c.Error == nil || c.Error.Status != 400 || !strings.Contains(c.Error.Message, "not this tier's model") {
		t.Errorf("a refused chat: %+v, want the SDK's error with status 400", c)
	}
	if c := calls[3]; !c.Aborted || c.Chunks != 3 || c.Error != nil {
		t.Errorf("abandoned stream: %+v", c)
	}
}
