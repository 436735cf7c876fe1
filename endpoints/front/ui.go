package front

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// llama-server's web UI: a browser that opens the front door's root URL
// (or a tier's prefix, /reasoning/) gets the chat page a head of the
// tier serves at "/" (gzipped, one file with everything inlined) and the
// read-only endpoints that page asks (FACTS.md Q11): /props, /slots
// (stripped to what says whether a slot is busy: other users' prompts
// stay on the head) and /models (/v1/models, the front door's merged list,
// answered by the handler). The page's chat requests are ordinary
// /v1/chat/completions, routed by model as every client's.

// uiPaths are the UI's pages and the read-only endpoints it calls; its
// other files are found by their shape (isUIPath).
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

// isUIPath reports whether a GET of path is the UI's: its pages and
// endpoints, a file under one of its directories, or a file at the root
// whose name has one of its extensions. No API path has one.
func isUIPath(path string) bool {
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

// uiRefused are the UI's endpoints that run something on the head for
// whoever calls them: llama-server's server-side tools and MCP (/tools)
// and its CORS proxy (/cors-proxy), off unless the head was started with
// them, and then "do not expose the server to untrusted environments".
// The front door, which many users share, never passes them on: it
// answers as llama-server does when they are off (403 feature_disabled),
// and the UI goes on without them.
var uiRefused = map[string]bool{"/tools": true, "/cors-proxy": true}

// llama-server's resumable streams (server-stream.cpp): a head keeps a
// chat's streamed answer by the UI's conversation id, and a page reloaded
// mid-answer asks POST /v1/streams/lookup which of its conversations have
// one, then GET /v1/stream to read it on. Through the front door the head
// of a conversation is not known (nor kept: the front door continues a cut
// stream on another head itself), so it answers as a head with no session
// for them: an empty list, and 404 for a stream. The page then shows what
// it kept and goes on.
const (
	streamsLookupPath = "/v1/streams/lookup"
	streamPath        = "/v1/stream"
)

// answerNoStreams answers the resumable streams' paths as a head holding
// none of the caller's.
func (s *Server) answerNoStreams(w http.ResponseWriter, c *call) {
	if c.path == streamsLookupPath {
		s.answer(w, c, http.StatusOK, []byte("[]\n"))
		return
	}
	s.reject(w, c, http.StatusNotFound, "not_found_error", "no stream to resume here: the front door continues a cut stream itself", nil)
}

// refuseFeature answers a uiRefused path as a head with the feature off.
func (s *Server) refuseFeature(w http.ResponseWriter, c *call) {
	s.reject(w, c, http.StatusForbidden, "feature_disabled", "this feature is disabled", nil)
}

// uiHeaders are the request headers passed to the head (caching and
// content negotiation), and the answer's headers passed back.
var (
	uiRequestHeaders = []string{"Accept", "Accept-Encoding", "Accept-Language", "If-None-Match", "If-Modified-Since", "Range"}
	uiAnswerHeaders  = []string{"Content-Type", "Content-Encoding", "Content-Length", "Cache-Control", "ETag", "Last-Modified",
		"Vary", "Content-Range", "Accept-Ranges",
		// The page is served cross-origin isolated (server-http.cpp: index.html).
		"Cross-Origin-Embedder-Policy", "Cross-Origin-Opener-Policy"}
)

// uiTier is the tier whose heads serve the page at the root URL: [front]
// ui_tier, else the first tier by name.
func (s *Server) uiTier() string {
	cfg := s.cfg.Load()
	if cfg.UITier != "" {
		return cfg.UITier
	}
	names := slices.Sorted(maps.Keys(cfg.Tiers))
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// uiHead is a routed head for tier's UI; with none, any tier's (the page
// is the same llama-server build), so that the page loads while its tier
// is away; nil when no head is routed at all.
func (s *Server) uiHead(tier string) *head {
	tab := s.tab.Load()
	if hs := tab.heads[tier]; len(hs) > 0 {
		return hs[0]
	}
	for _, t := range slices.Sorted(maps.Keys(tab.heads)) {
		if hs := tab.heads[t]; len(hs) > 0 {
			return hs[0]
		}
	}
	return nil
}

// serveUI answers a GET of the UI from a head of pinned's tier (a
// prefix's), else of the UI tier.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request, c *call, pinned string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
		return
	}
	tier := pinned
	if tier == "" {
		tier = s.uiTier()
		if m := r.URL.Query().Get("model"); m != "" && c.path == "/props" {
			if t, _ := s.resolve(m); t != "" {
				tier = t // a router's /props?model=: that model's head answers
			}
		}
	}
	h := s.uiHead(tier)
	if h == nil {
		s.uiUnavailable(w, c)
		return
	}
	c.tier = h.tier
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	target := "http://" + h.addr + c.path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		s.uiUnavailable(w, c)
		return
	}
	for _, k := range uiRequestHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	resp, err := s.opts.Transport.RoundTrip(req)
	if err != nil {
		s.uiUnavailable(w, c)
		return
	}
	defer resp.Body.Close()
	if c.path == "/slots" && resp.StatusCode == http.StatusOK {
		s.answerSlots(w, c, resp)
		return
	}
	if c.path == "/props" && pinned == "" && r.URL.Query().Get("model") == "" && resp.StatusCode == http.StatusOK {
		s.answerRouterProps(w, c, h, resp)
		return
	}
	for _, k := range uiAnswerHeaders {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.Header().Set(TierHeader, h.tier)
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	c.status, c.bytesOut, c.outcome = resp.StatusCode, n, OutcomeAnswered
}

// maxSlotsBody bounds a head's /slots answer read to strip it.
const maxSlotsBody = 4 << 20

// slotKeys are what the front door passes of each slot: which one, its
// context, whether it is busy. The rest (the prompt a slot holds, its
// next token, its sampling settings) is another user's.
var slotKeys = []string{"id", "id_task", "n_ctx", "is_processing", "speculative"}

// answerSlots passes a head's /slots on with each slot stripped to
// slotKeys.
func (s *Server) answerSlots(w http.ResponseWriter, c *call, resp *http.Response) {
	var slots []map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxSlotsBody)).Decode(&slots); err != nil {
		s.reject(w, c, http.StatusBadGateway, "server_error", "the head's /slots could not be read", nil)
		return
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
	w.Header().Set(TierHeader, c.tier)
	w.Header().Set("Cache-Control", "no-store")
	s.answer(w, c, http.StatusOK, append(b, '\n'))
}

// uiUnavailable is the page while no head is routed: a small page of the
// front door's own (HTML, not an API error a browser would show as text),
// which reloads itself, never cached.
func (s *Server) uiUnavailable(w http.ResponseWriter, c *call) {
	const retry = 10
	page := `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="` + strconv.Itoa(retry) + `">` +
		`<title>No model is serving</title></head><body><h1>No model is serving right now</h1>` +
		`<p>The cluster's GPUs are busy with other work; the chat comes back when a model is up again. This page reloads itself.</p></body></html>` + "\n"
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	w.Header().Set(TierHeader, "none")
	w.WriteHeader(http.StatusServiceUnavailable)
	n, _ := io.WriteString(w, page)
	c.status, c.bytesOut, c.outcome, c.why = http.StatusServiceUnavailable, int64(n), OutcomeRejected, "no head is routed for the web UI"
}

// The page at the root URL reaches every tier's model: the front door
// presents itself to it as llama-server's router does (FACTS.md Q11): its
// /props says "role": "router", so the page lists /v1/models (the merged
// list, each model "loaded" while a head of its tier is routed) for the
// user to pick from, asks /props?model= of each (answered by a head of
// that model's tier) and names the model in its chat requests, which the
// front door routes by model as every client's. /models/sse, the router's
// feed of model status changes, is held open with nothing to say: the
// list is read again when the page asks. Under a tier's prefix the page
// is that tier's llama-server's, in its own (model) mode.

// maxPropsBody bounds a head's /props answer read to rewrite it.
const maxPropsBody = 4 << 20

// answerRouterProps passes on a head's /props with "role": "router".
func (s *Server) answerRouterProps(w http.ResponseWriter, c *call, h *head, resp *http.Response) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPropsBody))
	var doc map[string]json.RawMessage
	if err != nil || json.Unmarshal(b, &doc) != nil || doc == nil {
		s.uiUnavailable(w, c)
		return
	}
	doc["role"] = json.RawMessage(`"router"`)
	out, _ := json.Marshal(doc)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set(TierHeader, h.tier)
	s.answer(w, c, http.StatusOK, out)
}

// modelsFeedPath is the router's feed of model status changes.
const modelsFeedPath = "/models/sse"

// modelsFeedHold is how long the feed is held before it ends (the page
// opens it again a second later): a bound on what one page holds.
var modelsFeedHold = 10 * time.Minute

// serveModelsFeed holds the feed open, saying nothing, until the page
// leaves, modelsFeedHold passes or the front door stops its feeds
// (StopFeeds, before its listeners shut down).
func (s *Server) serveModelsFeed(w http.ResponseWriter, r *http.Request, c *call) {
	if r.Method != http.MethodGet {
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	n, _ := io.WriteString(w, ": the front door's models; the list is read again from /v1/models\n\n")
	_ = http.NewResponseController(w).Flush()
	c.status, c.bytesOut, c.outcome = http.StatusOK, int64(n), OutcomeAnswered
	hold := time.NewTimer(modelsFeedHold)
	defer hold.Stop()
	select {
	case <-r.Context().Done():
	case <-hold.C:
	case <-s.feedsDone:
	}
}

// StopFeeds ends the held /models/sse feeds, so that the listeners shut
// down at once; call it before them. Safe to call more than once.
func (s *Server) StopFeeds() { s.stopFeeds.Do(func() { close(s.feedsDone) }) }
