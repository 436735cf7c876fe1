package front

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// What each request pays for in the front door, in process (no nginx, no
// network but loopback): the same small chat completion to a head that
// answers at once, directly and through the front door, one client on a
// kept-alive connection. go test -bench FrontRequest -benchmem: the
// difference of the two is the front door's cost per request (time and
// allocations, both sides of the loopback counted).

// quickHead answers every POST with a fixed small chat completion, and a
// stream of tokens for "stream":true bodies.
func quickHead(tb testing.TB) *httptest.Server {
	answer := []byte(`{"id":"c1","object":"chat.completion","model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"tiny","object":"model"}]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 8 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"t%d \"}}],\"created\":1,\"id\":\"c1\",\"model\":\"tiny\",\"system_fingerprint\":\"b1\",\"object\":\"chat.completion.chunk\"}\n\n", i)
			}
			io.WriteString(w, "data: {\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],\"created\":1,\"id\":\"c1\",\"model\":\"tiny\",\"object\":\"chat.completion.chunk\"}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// benchFront is a front door in an httptest server routing tier fast
// (model tiny) to head.
func benchFront(tb testing.TB, head *httptest.Server) string {
	cfg := DefaultConfig()
	cfg.Tiers["fast"] = DefaultTier
	s := New(cfg, Options{AccessLog: io.Discard})
	th := &testHead{tier: "fast", job: "1", models: []string{"tiny"}, srv: head}
	r := &rig{t: tb, s: s}
	r.route(nil, th)
	srv := httptest.NewServer(s)
	tb.Cleanup(srv.Close)
	return srv.URL
}

func benchPost(b *testing.B, url, body string) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

const benchChat = `{"model":"tiny","max_tokens":16,"temperature":0.7,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hi."}]}`

const benchStream = `{"model":"tiny","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Count."}]}`

func BenchmarkFrontRequest(b *testing.B) {
	head := quickHead(b)
	front := benchFront(b, head)
	for _, c := range []struct{ name, body string }{{"chat", benchChat}, {"stream", benchStream}} {
		b.Run(c.name+"/direct", func(b *testing.B) { benchPost(b, head.URL, c.body) })
		b.Run(c.name+"/front", func(b *testing.B) { benchPost(b, front, c.body) })
	}
	_ = time.Second
}
