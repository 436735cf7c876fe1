package fronttest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
