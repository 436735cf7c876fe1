package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
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
	path     string
	tier     string // the tier serving the model ("" until resolved)
	model    string // the model name sent to the head
	body     []byte
	size     int64
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
	// dispatched is when the current attempt was handed to the transport.
	dispatched time.Time
	// onWritten, set for a request that was held, tells its queue that
	// it was written to its head (the next held one may go).
	onWritten func()
	// ctx is the client's request's; kind the stream shape the front door
	// can continue (streamNone: not continued); backup is set when a
	// backup model answers (never continued).
	ctx    context.Context
	kind   streamKind
	backup bool
	// continued counts continuations on another head, moved those made
	// because the head drained; heads are the heads that served it.
	continued, moved int
	heads            []string
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
	c := &call{start: s.now(), method: r.Method, path: r.URL.Path}
	defer s.finish(c)
	switch {
	case r.URL.Path == "/v1/models" || r.URL.Path == "/models":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
			return
		}
		s.answer(w, c, http.StatusOK, mergedModels(s.tab.Load(), s.tierOf))
		return
	case r.URL.Path == "/health":
		s.answer(w, c, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
		return
	case !proxied[r.URL.Path]:
		s.reject(w, c, http.StatusNotFound, "invalid_request_error", "unknown path "+strconv.Quote(r.URL.Path), nil)
		return
	case r.Method != http.MethodPost:
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use POST", nil)
		return
	}
	if !s.prepare(w, r, c) {
		return
	}
	s.serve(w, r, c)
}

// prepare reads and checks the request: its body (bounded in size and
// time), its model (an alias replaced, the tier found) and its hold. It
// answers the client itself and returns false when the request goes no
// further.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, c *call) bool {
	cfg := s.cfg.Load()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(s.now().Add(cfg.ReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes))
	_ = rc.SetReadDeadline(time.Time{})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		s.reject(w, c, http.StatusRequestEntityTooLarge, "invalid_request_error",
			fmt.Sprintf("request body larger than %d bytes", cfg.MaxBodyBytes), nil)
		return false
	case err != nil:
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", "cannot read the request body: "+err.Error(), nil)
		return false
	}
	var fields struct {
		Model  *string `json:"model"`
		Stream bool    `json:"stream"`
	}
	if err := json.Unmarshal(body, &fields); err != nil {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", "the body is not a JSON object: "+err.Error(), nil)
		return false
	}
	model := cfg.DefaultModel
	if fields.Model != nil && *fields.Model != "" {
		model = *fields.Model
	}
	if model == "" {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", `"model" is required: name one of the models here`, s.knownModels())
		return false
	}
	tier, name := s.resolve(model)
	if tier == "" {
		s.reject(w, c, http.StatusNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist here: use one of the models listed", model), s.knownModels())
		return false
	}
	if fields.Model == nil || name != *fields.Model {
		if body, err = setModel(body, name); err != nil {
			s.reject(w, c, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
			return false
		}
	}
	hold, err := s.holdFor(r, tier)
	if err != nil {
		s.reject(w, c, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return false
	}
	c.tier, c.model, c.body, c.size, c.stream = tier, name, body, int64(len(body)), fields.Stream
	c.deadline = c.start.Add(hold)
	c.ctx = r.Context()
	if c.stream {
		c.kind = kindOf(c.path)
	}
	return true
}

// setModel sets the body's "model" to name (an alias, or the default
// model, becomes the name the head serves). Only that key changes.
func setModel(body []byte, name string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	obj["model"], _ = json.Marshal(name)
	return json.Marshal(obj)
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
			return 0, fmt.Errorf("%s: want a duration such as 30s, or seconds (got %q)", HoldHeader, v)
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: want 0 or more (got %q)", HoldHeader, v)
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

// finish counts the request and writes its access log line.
func (s *Server) finish(c *call) {
	if c.outcome == "" {
		c.outcome = OutcomeCancelled
	}
	tier, model := c.tier, c.model
	if tier == "" {
		model = "" // never a client's string as a label
	}
	s.metrics.requests.WithLabelValues(tier, model, c.outcome).Inc()
	if c.held > 0 {
		s.metrics.held.WithLabelValues(tier).Observe(c.held.Seconds())
	}
	if s.opts.AccessLog == nil {
		return
	}
	head := "-"
	switch {
	case len(c.heads) > 0:
		head = strings.Join(c.heads, ",")
	case c.head != nil:
		head = c.head.addr
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s method=%s path=%s status=%d tier=%s model=%s head=%s held_ms=%d duration_ms=%d bytes_in=%d bytes_out=%d attempts=%d outcome=%s",
		c.start.UTC().Format("2006-01-02T15:04:05.000Z"), c.method, strconv.Quote(c.path), c.status, orDash(tier),
		strconv.Quote(model), head, c.held.Milliseconds(), s.now().Sub(c.start).Milliseconds(), c.size, c.bytesOut,
		c.attempts, c.outcome)
	if c.continued > 0 {
		fmt.Fprintf(&b, " continued=%d moved=%d", c.continued, c.moved)
	}
	if c.why != "" {
		fmt.Fprintf(&b, " why=%s", strconv.Quote(c.why))
	}
	b.WriteByte('\n')
	_, _ = s.opts.AccessLog.Write(b.Bytes())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
