package front

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/front/accesslog"
	"slurm-llm/endpoints/front/stream"
	"slurm-llm/endpoints/front/webui"
	"slurm-llm/endpoints/front/wire"
)

// proxied are the paths passed on to a head (POST, routed by "model"):
// OpenAI's and llama-server's own, with the aliases llama-server answers.
var proxied = map[string]bool{
	"/v1/chat/completions": true, "/chat/completions": true,
	"/v1/completions": true, "/completions": true,
	"/v1/embeddings": true, "/embeddings": true,
	"/completion": true, "/infill": true,
	"/v1/rerank": true, "/rerank": true, "/v1/reranking": true,
	"/tokenize": true, "/detokenize": true, "/apply-template": true,
}

// HoldHeader is the request header by which a client asks for another
// hold than its tier's: a Go duration ("90s") or seconds ("90"), at most
// [front] hold_max; "0" answers at once.
const HoldHeader = "X-LLM-Hold"

// TierHeader names, on every answer, the tier that served it ("none" for
// the front door's own 503).
const TierHeader = "X-LLM-Tier"

// call is one client request as it goes through the front door.
type call struct {
	start    time.Time
	method   string
	path     string // the path as the head serves it (a tier's prefix taken off)
	urlPath  string // the path the client asked for
	tier     string // the tier serving the model ("" until resolved)
	model    string // the model name sent to the head
	conv     string // wire.ConversationKey of the request's conversation ("" for none)
	body     []byte
	keys     wire.Keys // the body's top-level keys the front door reads
	size     int64
	reserved int64 // body bytes counted in the front door's in-flight bound
	stream   bool
	deadline time.Time
	held     time.Duration
	attempts int
	head     *head  // the head of the current attempt
	status   int    // status the client got
	bytesOut int64  // body bytes the client got
	outcome  string // llm_front_requests_total's outcome
	why      string // for the log: why the front door answered itself
	// sent is set once the head's answer started reaching the client;
	// failure is the current attempt's error before that.
	sent    bool
	failure error
	// gone is set once a write to the client failed or the client left
	// before its answer's end: the answer is then cancelled, not cut,
	// and no head is blamed.
	gone bool
	// reused is set when the current attempt went on a kept-alive
	// connection; staleRetried once such a connection failed before the
	// answer and the request went again.
	reused, staleRetried bool
	// holdAsked: the client set its hold (X-LLM-Hold), which then bounds
	// any wait in the front door, a busy tier's too.
	holdAsked bool
	// origin is the client's browser origin when cors_origins allows it
	// (its answers are marked for it).
	origin string
	// headReleased is set once the splicer gave back the head of the
	// current attempt (the stream went on elsewhere).
	headReleased bool
	// header is the client's request header (for continuations).
	header http.Header
	// dispatched is when the current attempt was handed to the transport.
	dispatched time.Time
	// onWritten, set for a request that was held, tells its queue that
	// it was written to its head (the next held one may go).
	onWritten func()
	// ctx is the client's request's; kind the stream shape the front door
	// can continue (stream.None: not continued); backup is set when a
	// backup model answers (never continued).
	ctx    context.Context
	kind   stream.Kind
	backup bool
	// continued counts continuations on another head, moved those made
	// because the head drained; heads are the heads that served it.
	continued, moved int
	// restored counts the continuations sent to a head that restored the
	// conversation's saved slot first; pause is the continuations' pauses
	// (from the cut, or the head's drain, to the continuation sent).
	restored int
	pause    time.Duration
	heads    []string
	// tally is what the answer says of itself: its tokens and its finish
	// reason; usageAsked is set when the front door asked a chat stream's
	// head for its usage chunk on its own (the client then does not get
	// that chunk).
	tally      wire.Tally
	usageAsked bool
	// id is who sent it; admitted and tracked are set once the user's
	// limits and fair share count it (until finish).
	id                access.Identity
	admitted, tracked bool
}

// written runs onWritten, if set.
func (c *call) written() {
	if c.onWritten != nil {
		c.onWritten()
	}
}

// ServeHTTP is the front door. Every request ends in exactly one access
// log line and one count.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := &call{start: s.now(), method: r.Method, path: r.URL.Path, urlPath: r.URL.Path}
	defer s.finish(c)
	pinned, path := s.prefixed(r.URL.Path)
	c.path = path
	s.cors(w, r, c)
	switch {
	case r.Method == http.MethodOptions:
		s.options(w, r, c)
		return
	case path == "/health":
		s.answer(w, c, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
		return
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && webui.IsPath(path):
		s.serveUI(w, r, c, pinned)
		return
	case webui.Refused(path):
		s.refuseFeature(w, c)
		return
	case path == webui.StreamsLookupPath || path == webui.StreamPath:
		s.answerNoStreams(w, c)
		return
	case path == webui.ModelsFeedPath && pinned == "":
		s.serveModelsFeed(w, r, c)
		return
	case pinned == "" && s.isPrefix(path):
		// A tier's prefix without its slash ("/reasoning"): its UI is at "/reasoning/".
		http.Redirect(w, r, path+"/", http.StatusMovedPermanently)
		c.status, c.outcome = http.StatusMovedPermanently, OutcomeAnswered
		return
	case s.keysPath(path):
		sw := &statusWriter{ResponseWriter: w}
		s.opts.Access.Keys.ServeHTTP(sw, r)
		c.status, c.outcome = sw.code(), OutcomeAnswered
		return
	case !s.identify(w, r, c):
		return
	case path == "/v1/models" || path == "/models":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
			return
		}
		s.answer(w, c, http.StatusOK, mergedModels(s.tab.Load(), s.tierOf, pinned))
		return
	case !proxied[path]:
		s.reject(w, c, http.StatusNotFound, "invalid_request_error", "unknown path "+strconv.Quote(wire.Echo(r.URL.Path)), nil)
		return
	case r.Method != http.MethodPost:
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use POST", nil)
		return
	}
	if !s.prepare(w, r, c, pinned) {
		return
	}
	if c.path != r.URL.Path {
		r = withPath(r, c.path) // the head serves the path without the tier's prefix
	}
	s.serve(w, r, c)
}

// withPath is r sent to path (a shallow copy, as r.WithContext makes).
func withPath(r *http.Request, path string) *http.Request {
	out := new(http.Request)
	*out = *r
	u := *r.URL
	u.Path, u.RawPath = path, ""
	out.URL = &u
	return out
}

// prefixed splits a path under a tier's prefix ("/reasoning/v1/models")
// into the tier and the path its heads serve ("/v1/models"); other paths
// come back as they are, with no tier.
// The longest prefix that matches wins ("/qwen/coder" over "/qwen").
func (s *Server) prefixed(path string) (tier, rest string) {
	rest = path
	best := 0
	for name, ft := range s.cfg.Load().Tiers {
		p := ft.Prefix
		if p != "" && len(p) > best && strings.HasPrefix(path, p) && len(path) > len(p) && path[len(p)] == '/' {
			tier, rest, best = name, path[len(p):], len(p)
		}
	}
	return tier, rest
}

// isPrefix reports whether path is a tier's prefix itself.
func (s *Server) isPrefix(path string) bool {
	for _, ft := range s.cfg.Load().Tiers {
		if ft.Prefix != "" && ft.Prefix == path {
			return true
		}
	}
	return false
}

// prepare reads and checks the request: its body (bounded in size and
// time, and counted in the bound on bodies in flight), its model (an alias
// replaced, the tier found) and its hold. It answers the client itself and
// returns false when the request goes no further.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, c *call, pinned string) bool {
	cfg := s.cfg.Load()
	if !s.readBody(w, r, c, cfg) {
		return false
	}
	keys, err := wire.ReadKeys(c.body)
	if err != nil {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return false
	}
	model, ok := keys.ModelName()
	if !ok {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", `"model" must be a string`, nil)
		return false
	}
	asked := model
	if model == "" {
		model = cfg.DefaultModel
	}
	tier, name, ok := s.route(w, c, model, pinned)
	if !ok {
		return false
	}
	kind := stream.None
	if keys.Stream {
		kind = stream.KindOf(c.path)
	}
	var edits []wire.Edit
	// The model the head serves: an alias's, the default, or under a
	// prefix the tier's for a name no tier serves is left as the client
	// wrote it (the tier's own llama-server answered any name).
	if _, alias := cfg.Aliases[asked]; name != asked && (pinned == "" || asked == "" || alias) {
		edits = append(edits, wire.SetModel(c.body, keys, name))
	}
	if kind.Counted() && !keys.UsageAsked() {
		edits = append(edits, wire.AskUsage(c.body, keys))
		c.usageAsked = true
	}
	if len(edits) > 0 {
		c.body = wire.Apply(c.body, edits...)
		if keys, err = wire.ReadKeys(c.body); err != nil { // offsets moved
			s.reject(w, c, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
			return false
		}
	}
	hold, err := s.holdFor(r, tier)
	if err != nil {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return false
	}
	c.tier, c.model, c.keys, c.stream = tier, name, keys, keys.Stream
	if cfg.AffinityTTL > 0 {
		c.conv = wire.ConversationKey(name, c.body)
	}
	if !s.admit(w, c) {
		return false
	}
	c.deadline, c.holdAsked = c.start.Add(hold), r.Header.Get(HoldHeader) != ""
	c.ctx, c.kind = r.Context(), kind
	return true
}

// route names the tier and model of a request for model ("" when it
// names none: the UI tier's), under a tier's prefix (pinned) or not; it answers the
// client itself when there is none (ok false). Under a prefix, a model of
// another tier is refused (the URL and the body disagree: which one the
// client meant is not the front door's guess), and a name no tier serves
// is the tier's model when it serves one only, as the tier's own
// llama-server, which nginx's per-tier URL reached, answers any name.
func (s *Server) route(w http.ResponseWriter, c *call, model, pinned string) (tier, name string, ok bool) {
	if model == "" && pinned == "" {
		// The root URL is the UI tier's page (ui.go), and llama-server's
		// own UI, serving one model, names none: such a request is the UI
		// tier's, as it was its llama-server's.
		ui := s.uiTier()
		if only := s.tierModels(ui); len(only) == 1 {
			return ui, only[0], true
		}
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", `"model" is required: name one of the models here`, s.knownModels())
		return "", "", false
	}
	if model != "" {
		tier, name = s.resolve(model)
	}
	switch {
	case pinned != "" && tier != "" && tier != pinned:
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("the model %q is served by tier %s, not by this URL's tier %s (%s): send it to /v1/... without the prefix, which routes by model",
				wire.Echo(model), tier, pinned, s.tierCfg(pinned).Prefix), s.tierModels(pinned))
		return "", "", false
	case pinned != "" && tier == "":
		if only := s.tierModels(pinned); len(only) == 1 {
			return pinned, only[0], true
		}
		s.reject(w, c, http.StatusNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist at this URL (tier %s): use one of the models listed", wire.Echo(model), pinned), s.tierModels(pinned))
		return "", "", false
	case tier == "":
		s.reject(w, c, http.StatusNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist here: use one of the models listed", wire.Echo(model)), s.knownModels())
		return "", "", false
	}
	return tier, name, true
}

// errBusyBodies is the bound on request bodies in flight, reached.
var errBusyBodies = errors.New("busy: too many request bytes in flight")

// readBody reads the request's body into c.body, bounded: by max_body_bytes
// (413), by read_timeout, and by the bytes all requests in flight hold
// (max_body_bytes_in_flight: 503 busy, at once, before reading more). A
// body of known length is read into one buffer of that size.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, c *call, cfg *Config) bool {
	tooLarge := func() bool {
		s.reject(w, c, http.StatusRequestEntityTooLarge, "invalid_request_error",
			fmt.Sprintf("request body larger than %d bytes", cfg.MaxBodyBytes), nil)
		return false
	}
	if r.ContentLength > cfg.MaxBodyBytes {
		return tooLarge()
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(s.now().Add(cfg.ReadTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	busy := func() bool {
		s.unavailable(w, c, &refusal{busy: true, why: "no hold: " + errBusyBodies.Error()})
		return false
	}
	bad := func(err error) bool {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", "cannot read the request body: "+wire.Echo(err.Error()), nil)
		return false
	}
	if r.ContentLength >= 0 {
		if s.reserve(c, r.ContentLength, cfg) != nil {
			return busy()
		}
		c.body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, c.body); err != nil {
			return bad(err)
		}
		c.size = r.ContentLength
		return true
	}
	// Unknown length (chunked): read in steps, each counted first.
	buf := []byte{}
	for {
		if len(buf) == cap(buf) {
			grow := min(max(2*int64(cap(buf)), 64<<10), cfg.MaxBodyBytes+1) // one byte more tells a body too large
			if s.reserve(c, min(grow, cfg.MaxBodyBytes), cfg) != nil {
				return busy()
			}
			buf = append(make([]byte, 0, grow), buf...)
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > cfg.MaxBodyBytes {
			return tooLarge()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return bad(err)
		}
	}
	c.body, c.size = buf, int64(len(buf))
	return true
}

// reserve counts a request's body as total bytes in the bound on bodies in
// flight (max_body_bytes_in_flight), or fails without counting it.
func (s *Server) reserve(c *call, total int64, cfg *Config) error {
	add := total - c.reserved
	if s.bodyBytes.Add(add) > cfg.MaxBodyBytesInFlight {
		s.bodyBytes.Add(-add)
		return errBusyBodies
	}
	c.reserved = total
	return nil
}

// holdFor is the request's hold: its tier's, or what the client asks in
// HoldHeader, at most hold_max.
func (s *Server) holdFor(r *http.Request, tier string) (time.Duration, error) {
	hold := s.tierCfg(tier).Hold
	v := strings.TrimSpace(r.Header.Get(HoldHeader))
	if v == "" {
		return hold, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseFloat(v, 64)
		if nerr != nil || n < 0 || n > 1e6 {
			return 0, fmt.Errorf("%s: want a duration such as 30s, or seconds (got %q)", HoldHeader, wire.Echo(v))
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: want 0 or more (got %q)", HoldHeader, wire.Echo(v))
	}
	return min(d, s.cfg.Load().HoldMax), nil
}

// answer writes the front door's own 200.
func (s *Server) answer(w http.ResponseWriter, c *call, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	n, _ := w.Write(body)
	c.status, c.bytesOut, c.outcome = status, int64(n), OutcomeAnswered
}

// reject answers a request the front door refuses, in OpenAI's error
// shape; models, when given, lists the models there are.
func (s *Server) reject(w http.ResponseWriter, c *call, status int, typ, msg string, models []string) {
	doc := map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}}
	if models != nil {
		doc["models"] = models
	}
	b, _ := json.Marshal(doc)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(TierHeader, "none")
	w.WriteHeader(status)
	n, _ := w.Write(append(b, '\n'))
	c.status, c.bytesOut, c.outcome, c.why = status, int64(n), OutcomeRejected, msg
}

// finish counts the request, gives back its body's bytes, and hands its
// access log line to the log's writer (never written on the answer's
// path: a slow journal must not slow answers).
func (s *Server) finish(c *call) {
	if c.reserved > 0 {
		s.bodyBytes.Add(-c.reserved)
	}
	if c.outcome == "" || c.gone && c.outcome != OutcomeRejected && c.outcome != OutcomeUnavailable {
		c.outcome = OutcomeCancelled
	}
	tier, model := c.tier, c.model
	if tier == "" {
		model = "" // never a client's string as a label
	}
	s.metrics.request(tier, model, c.outcome).Inc()
	s.countAnswer(c)
	s.account(c)
	if c.held > 0 {
		s.metrics.held.WithLabelValues(tier).Observe(c.held.Seconds())
	}
	if s.access == nil {
		return
	}
	head := "-"
	switch {
	case len(c.heads) > 0:
		head = strings.Join(c.heads, ",")
	case c.head != nil:
		head = c.head.addr
	}
	s.access.Add(accesslog.Entry{Start: c.start, Method: c.method, Path: c.urlPath, Status: c.status, Tier: tier, Model: model,
		Head: head, Held: c.held, Duration: s.now().Sub(c.start), BytesIn: c.size, BytesOut: c.bytesOut,
		Attempts: c.attempts, Outcome: c.outcome, Continued: c.continued, Moved: c.moved, Restored: c.restored, Pause: c.pause, Why: c.why,
		ID: c.id, Prompt: c.tally.Prompt, Completion: c.tally.Completion, Counted: c.tally.Counted})
}

// cors marks the answer to a browser whose origin is allowed
// (cors_origins); nothing for any other.
func (s *Server) cors(w http.ResponseWriter, r *http.Request, c *call) {
	origin := r.Header.Get("Origin")
	if origin == "" || !s.originAllowed(origin) {
		return
	}
	c.origin = origin
	markCORS(w.Header(), origin)
}

// markCORS marks an answer's header for an allowed browser origin.
func markCORS(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	h.Set("Access-Control-Expose-Headers", TierHeader+", Retry-After")
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.cfg.Load().CORSOrigins {
		if o == "*" || o == origin {
			return true
		}
	}
	return false
}

// options answers OPTIONS: a browser's CORS preflight from an allowed
// origin gets what it asks for (the methods the front door serves, the
// headers it asked to send); any other OPTIONS gets the methods alone,
// and a browser then refuses the cross-origin call, as it should.
func (s *Server) options(w http.ResponseWriter, r *http.Request, c *call) {
	h := w.Header()
	h.Set("Allow", "GET, HEAD, POST, OPTIONS")
	if origin := r.Header.Get("Origin"); origin != "" && s.originAllowed(origin) && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS")
		if asked := r.Header.Get("Access-Control-Request-Headers"); asked != "" && len(asked) <= 4096 {
			h.Set("Access-Control-Allow-Headers", asked)
		}
		h.Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusNoContent)
	c.status, c.outcome = http.StatusNoContent, OutcomeAnswered
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int { return max(w.status, http.StatusOK) }
