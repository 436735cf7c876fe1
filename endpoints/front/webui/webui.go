// Package webui serves llama-server's web UI through the front door: a
// browser that opens the front door's root URL (or a tier's prefix,
// /reasoning/) gets the chat page a head serves at "/" (gzipped, one file
// with everything inlined) and the read-only endpoints that page asks
// (FACTS.md Q11): /props, /slots (stripped to what says whether a slot is
// busy: other users' prompts stay on the head) and /models (the front
// door's merged /v1/models). It knows which paths are the UI's (IsPath,
// Refused, the resumable streams' and the models feed's), passes a GET of
// the UI to a head (Proxy) and holds the models feed open (Feed).
//
// It picks no head and routes no request: which head serves the page,
// and the page's chat requests (ordinary /v1/chat/completions, routed by
// model as every client's), are the front door's.
package webui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// uiPaths are the UI's pages and the read-only endpoints it calls; its
// other files are found by their shape (IsPath).
var uiPaths = map[string]bool{"/": true, "/index.html": true, "/props": true, "/slots": true}

// uiDirs are where a build of the UI keeps files under a directory: its
// hashed bundles (/_app/), an older build's (/assets/), the pictures of
// its suggestions (/recommended-mcp/).
var uiDirs = []string{"/_app/", "/assets/", "/recommended-mcp/"}

// uiFileExts are the kinds of file a build of the UI serves at the root
// (favicon.svg, manifest.webmanifest, sw.js, build.json, pwa-192x192.png…:
// llama-server registers every file of its embedded asset table, and the
// set changes from build to build, FACTS.md Q11).
var uiFileExts = map[string]bool{".html": true, ".js": true, ".css": true, ".json": true, ".webmanifest": true,
	".ico": true, ".svg": true, ".png": true, ".jpg": true, ".webp": true, ".woff": true, ".woff2": true, ".txt": true}

// IsPath reports whether a GET of path is the UI's: its pages and
// endpoints, a file under one of its directories, or a file at the root
// whose name has one of its extensions. No API path has one.
func IsPath(path string) bool {
	if uiPaths[path] {
		return true
	}
	for _, d := range uiDirs {
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	name, root := strings.CutPrefix(path, "/")
	if !root || strings.Contains(name, "/") {
		return false
	}
	dot := strings.LastIndexByte(name, '.')
	return dot > 0 && uiFileExts[strings.ToLower(name[dot:])]
}

// refused are the UI's endpoints that run something on the head for
// whoever calls them (Refused).
var refused = map[string]bool{"/tools": true, "/cors-proxy": true}

// Refused reports whether path is one of the UI's endpoints that run
// something on the head for whoever calls them: llama-server's
// server-side tools and MCP (/tools) and its CORS proxy (/cors-proxy), off
// unless the head was started with them, and then "do not expose the
// server to untrusted environments". The front door, which many users
// share, never passes them on: it answers as llama-server does when they
// are off (403 feature_disabled), and the UI goes on without them.
func Refused(path string) bool { return refused[path] }

// llama-server's resumable streams (server-stream.cpp): a head keeps a
// chat's streamed answer by the UI's conversation id, and a page reloaded
// mid-answer asks POST /v1/streams/lookup which of its conversations have
// one, then GET /v1/stream to read it on. Through the front door the head
// of a conversation is not known (nor kept: the front door continues a cut
// stream on another head itself), so it answers as a head with no session
// for them: an empty list, and 404 for a stream. The page then shows what
// it kept and goes on.
const (
	StreamsLookupPath = "/v1/streams/lookup"
	StreamPath        = "/v1/stream"
)

// uiHeaders are the request headers passed to the head (caching and
// content negotiation), and the answer's headers passed back.
var (
	uiRequestHeaders = []string{"Accept", "Accept-Encoding", "Accept-Language", "If-None-Match", "If-Modified-Since", "Range"}
	uiAnswerHeaders  = []string{"Content-Type", "Content-Encoding", "Content-Length", "Cache-Control", "ETag", "Last-Modified",
		"Vary", "Content-Range", "Accept-Ranges",
		// The page is served cross-origin isolated (server-http.cpp: index.html).
		"Cross-Origin-Embedder-Policy", "Cross-Origin-Opener-Policy"}
)

// Errors of a GET of the UI that wrote nothing: the caller answers.
var (
	// ErrNoHead: the head did not answer (or its /props could not be
	// read): the page is unavailable (Unavailable).
	ErrNoHead = errors.New("the head did not answer for the web UI")
	// ErrSlots: the head's /slots could not be read.
	ErrSlots = errors.New("the head's /slots could not be read")
)

// proxyTimeout bounds a GET of the UI passed to a head.
const proxyTimeout = 30 * time.Second

// Proxy passes r, a GET (or HEAD) of the UI's path, to the head at addr
// through rt, and the head's answer back: /slots stripped to what says
// whether a slot is busy, /props said as a router's when router is set,
// anything else as the head gave it. It returns the status and the body's
// bytes written, or an error (ErrNoHead, ErrSlots) when it wrote nothing.
// The caller sets the answer's other headers (the tier's) first.
func Proxy(w http.ResponseWriter, r *http.Request, rt http.RoundTripper, addr, path string, router bool) (int, int64, error) {
	ctx, cancel := context.WithTimeout(r.Context(), proxyTimeout)
	defer cancel()
	target := "http://" + addr + path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		return 0, 0, ErrNoHead
	}
	for _, k := range uiRequestHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, 0, ErrNoHead
	}
	defer resp.Body.Close()
	if path == "/slots" && resp.StatusCode == http.StatusOK {
		return answerSlots(w, resp)
	}
	if path == "/props" && router && resp.StatusCode == http.StatusOK {
		return answerRouterProps(w, resp)
	}
	for _, k := range uiAnswerHeaders {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	return resp.StatusCode, n, nil
}

// answer writes a JSON answer of the front door's own.
func answer(w http.ResponseWriter, status int, body []byte) (int, int64, error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	n, _ := w.Write(body)
	return status, int64(n), nil
}

// maxSlotsBody bounds a head's /slots answer read to strip it.
const maxSlotsBody = 4 << 20

// slotKeys are what the front door passes of each slot: which one, its
// context, whether it is busy. The rest (the prompt a slot holds, its
// next token, its sampling settings) is another user's.
var slotKeys = []string{"id", "id_task", "n_ctx", "is_processing", "speculative"}

// answerSlots passes a head's /slots on with each slot stripped to
// slotKeys.
func answerSlots(w http.ResponseWriter, resp *http.Response) (int, int64, error) {
	var slots []map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxSlotsBody)).Decode(&slots); err != nil {
		return 0, 0, ErrSlots
	}
	out := make([]map[string]json.RawMessage, 0, len(slots))
	for _, sl := range slots {
		kept := map[string]json.RawMessage{}
		for _, k := range slotKeys {
			if v, ok := sl[k]; ok {
				kept[k] = v
			}
		}
		out = append(out, kept)
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Cache-Control", "no-store")
	return answer(w, http.StatusOK, append(b, '\n'))
}

// The page at the root URL reaches every tier's model: the front door
// presents itself to it as llama-server's router does (FACTS.md Q11): its
// /props says "role": "router", so the page lists /v1/models (the merged
// list, each model "loaded" while a head of its tier is routed) for the
// user to pick from, asks /props?model= of each (answered by a head of
// that model's tier) and names the model in its chat requests, which the
// front door routes by model as every client's. /models/sse, the router's
// feed of model status changes, is held open with nothing to say (Feed):
// the list is read again when the page asks. Under a tier's prefix the
// page is that tier's llama-server's, in its own (model) mode.

// maxPropsBody bounds a head's /props answer read to rewrite it.
const maxPropsBody = 4 << 20

// answerRouterProps passes on a head's /props with "role": "router".
func answerRouterProps(w http.ResponseWriter, resp *http.Response) (int, int64, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPropsBody))
	var doc map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &doc) != nil || doc == nil {
		return 0, 0, ErrNoHead
	}
	doc["role"] = json.RawMessage(`"router"`)
	out, _ := json.Marshal(doc)
	w.Header().Set("Cache-Control", "no-cache")
	return answer(w, http.StatusOK, out)
}

// Unavailable writes the page while no head is routed: a small page of
// the front door's own (HTML, not an API error a browser would show as
// text), which reloads itself, never cached; 503. It returns the bytes of
// the page written.
func Unavailable(w http.ResponseWriter) int64 {
	const retry = 10
	page := `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="` + strconv.Itoa(retry) + `">` +
		`<title>No model is serving</title></head><body><h1>No model is serving right now</h1>` +
		`<p>The cluster's GPUs are busy with other work; the chat comes back when a model is up again. This page reloads itself.</p></body></html>` + "\n"
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	w.WriteHeader(http.StatusServiceUnavailable)
	n, _ := io.WriteString(w, page)
	return int64(n)
}

// ModelsFeedPath is the router's feed of model status changes (Feed).
const ModelsFeedPath = "/models/sse"

// feedHold is how long the feed is held before it ends (the page opens it
// again a second later): a bound on what one page holds.
var feedHold = 10 * time.Minute

// Feed answers a GET of the models feed: 200, an event stream saying
// nothing, held open until the page leaves, feedHold passes or stop is
// closed (the front door's listeners are shutting down). It returns the
// bytes written.
func Feed(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) int64 {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	n, _ := io.WriteString(w, ": the front door's models; the list is read again from /v1/models\n\n")
	_ = http.NewResponseController(w).Flush()
	hold := time.NewTimer(feedHold)
	defer hold.Stop()
	select {
	case <-r.Context().Done():
	case <-hold.C:
	case <-stop:
	}
	return int64(n)
}
