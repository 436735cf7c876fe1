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

// uiPaths are the UI's files and the read-only endpoints it calls.
var uiPaths = map[string]bool{"/": true, "/index.html": true, "/favicon.ico": true, "/props": true, "/slots": true}

// isUIPath reports whether a GET of path is the UI's (its assets, where a
// build has separate files, under /_app/ or /assets/).
func isUIPath(path string) bool {
	return uiPaths[path] || strings.HasPrefix(path, "/_app/") || strings.HasPrefix(path, "/assets/")
}

// uiHeaders are the request headers passed to the head (caching and
// content negotiation), and the answer's headers passed back.
var (
	uiRequestHeaders = []string{"Accept", "Accept-Encoding", "Accept-Language", "If-None-Match", "If-Modified-Since", "Range"}
	uiAnswerHeaders  = []string{"Content-Type", "Content-Encoding", "Content-Length", "Cache-Control", "ETag", "Last-Modified",
		"Vary", "Content-Range", "Accept-Ranges"}
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
