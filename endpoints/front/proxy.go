package front

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"slurm-llm/endpoints/front/wire"
	"slurm-llm/endpoints/tiers"
)

// maxAttempts bounds the heads one request is sent to: each failed before
// any byte reached the client, and each is then skipped for fail_timeout,
// so more would mean the heads fail as fast as they come.
const maxAttempts = 8

// errHeadUnavailable is a head's own 503 (llama-server answers it while
// its model loads): nothing of it reaches the client; the request goes to
// another head or waits.
var errHeadUnavailable = errors.New("head answered 503")

// serve sends the request to a head, again to another after a failure
// before the first byte, holding it while its tier has none; or answers
// 503 (or the backup model) when the hold rule says no.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, c *call) {
	ctx := r.Context()
	c.header = r.Header
	for c.attempts < maxAttempts {
		h, ref := s.acquire(ctx, c)
		if h == nil && ref == nil {
			return // the client left while held
		}
		if h == nil {
			if !s.backup(w, r, c) {
				s.unavailable(w, c, ref)
			}
			return
		}
		s.begin(c)
		if s.attempt(w, r, c, h) {
			return
		}
		if ctx.Err() != nil {
			return
		}
		reason := "error"
		if c.reused && !c.staleRetried && !errors.Is(c.failure, errHeadUnavailable) {
			// A kept-alive connection the head had closed: the head is
			// not at fault, and the request goes again on a new one.
			c.staleRetried = true
			s.metrics.retries.WithLabelValues(c.tier, "stale_connection").Inc()
			s.log.Debug("kept-alive connection to a head was closed; trying again", "tier", c.tier, "head", h.addr, "error", c.failure)
			continue
		}
		s.markFailing(h)
		if errors.Is(c.failure, errHeadUnavailable) {
			reason = "head_503"
		}
		s.metrics.retries.WithLabelValues(c.tier, reason).Inc()
		s.log.Debug("head failed before answering; trying again", "tier", c.tier, "head", h.addr, "error", c.failure)
	}
	s.unavailable(w, c, &refusal{view: s.view(c.tier), why: fmt.Sprintf("%d heads failed before answering", c.attempts)})
}

// attempt sends the request to h once. It reports whether the request is
// over: answered (whole or cut), or the client left; false means h failed
// before any byte reached the client, and the request may go elsewhere.
func (s *Server) attempt(w http.ResponseWriter, r *http.Request, c *call, h *head) bool {
	c.attempts++
	c.head, c.failure, c.sent, c.headReleased = h, nil, false, false
	defer func() {
		if !c.headReleased {
			s.release(h)
		}
	}()
	defer c.written()
	cw := &clientWriter{ResponseWriter: w, c: c, rc: http.NewResponseController(w), timeout: s.cfg.Load().WriteTimeout, now: s.now}
	out := r.WithContext(context.WithValue(r.Context(), callKey{}, c))
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				// The copy to the client broke: the client left (a failed
				// write, or its context ended), or the head broke
				// mid-answer and the client's answer is cut.
				if c.gone || r.Context().Err() != nil {
					c.gone = true
				} else {
					c.outcome = OutcomeCut
					s.metrics.upErrors.WithLabelValues(c.tier, "mid_answer").Inc()
				}
			}
			panic(p)
		}
	}()
	s.rp.ServeHTTP(cw, out)
	switch {
	case c.sent && c.gone:
		return true
	case c.sent:
		if c.outcome == "" { // a splicer that gave up says cut
			c.outcome = OutcomeAnswered
		}
		return true
	case r.Context().Err() != nil:
		return true
	case c.failure != nil:
		s.metrics.upErrors.WithLabelValues(c.tier, "before_answer").Inc()
		return false
	}
	return true
}

// callKey carries the call to the proxy's hooks.
type callKey struct{}

func callOf(ctx context.Context) *call { return ctx.Value(callKey{}).(*call) }

// newProxy is the standard library's reverse proxy with the front door's
// hooks: the head is the call's, a head's 503 and every transport error
// are handed back to serve (nothing is written), answers are flushed as
// they come (streams, chunk by chunk).
func (s *Server) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			c := callOf(pr.In.Context())
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", c.head.addr, c.head.addr
			pr.Out.Body = io.NopCloser(bytes.NewReader(c.body))
			pr.Out.ContentLength = int64(len(c.body))
			pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.body)), nil }
			pr.Out.Header.Del(HoldHeader)
			// The body was read whole already: a head's 100 Continue would
			// only stand between the client and the head's real answer.
			pr.Out.Header.Del("Expect")
			replayable(pr.Out.Header)
			pr.SetXForwarded()
			c.reused = false
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { c.reused = i.Reused }}
			if c.onWritten != nil { // a held request: the next one waits for it
				trace.WroteRequest = func(httptrace.WroteRequestInfo) { c.written() }
			}
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace))
			c.dispatched = s.now()
			if c.attempts == 1 {
				s.metrics.overhead.Observe(c.dispatched.Sub(c.start).Seconds() - c.held.Seconds())
			}
		},
		Transport: s.opts.Transport,
		// FlushInterval 0: the proxy flushes an event stream, or an answer
		// of unknown length, at every write anyway; a whole JSON answer is
		// written once.
		BufferPool: bufferPool{},
		ErrorLog:   log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			c := callOf(resp.Request.Context())
			if resp.StatusCode == http.StatusServiceUnavailable {
				return errHeadUnavailable
			}
			resp.Header.Set(TierHeader, c.head.tier)
			if c.origin != "" {
				markCORS(resp.Header, c.origin) // a head's 1xx cleared what ServeHTTP set
			}
			switch {
			case resp.StatusCode >= http.StatusBadRequest:
				c.tally.Finish = wire.FinishError
			case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
				if resp.StatusCode == http.StatusOK {
					resp.Body = s.newSplicer(c, resp.Body)
				}
			default:
				resp.Body = wire.Sniff(resp.Body, &c.tally)
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			callOf(r.Context()).failure = err
		},
	}
}

// replayable lets the transport send a request again on another
// connection when the kept-alive one it took dies before any answer (the
// head closed it as it was taken). Go's transport does that only for a
// request it may send twice: an idempotent method, or one marked with an
// Idempotency-Key, which with a nil value is not sent. A /completion the
// head answered nothing to may go again; once an answer began, nothing is
// sent twice (the transport retries before a response only). Without
// it, after a flood issue 38's benchmark took two such connections in a
// row: the second failure blamed the head, and every request of the tier
// waited fail_timeout for a head that was serving.
func replayable(h http.Header) {
	_, key := h["Idempotency-Key"]
	_, xkey := h["X-Idempotency-Key"]
	if !key && !xkey {
		h["Idempotency-Key"] = nil
	}
}

// markFailing skips h for fail_timeout: it failed a request.
func (s *Server) markFailing(h *head) {
	d := s.cfg.Load().FailTimeout
	h.failedUntil.Store(s.now().Add(d).UnixNano())
	// A request held meanwhile because h was skipped may go once h is
	// usable again: nothing else need come by then (a slot of another head
	// freed, a pass), and it waited for the whole of another head's answer.
	time.AfterFunc(d+time.Millisecond, func() {
		if q, ok := s.queues.Load(h.tier); ok && q.(*queue).waiting.Load() > 0 {
			s.dispatch(q.(*queue))
		}
	})
}

// bufferPool lends the proxy its copy buffers (32 KiB each) instead of
// allocating one per answer.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

// clientWriter is the client's ResponseWriter as the proxy writes it: it
// marks the call sent at the first header, counts bytes, and gives each
// write write_timeout (a client that stops reading is cut; a stream as a
// whole has no deadline).
type clientWriter struct {
	http.ResponseWriter
	c       *call
	rc      *http.ResponseController
	timeout time.Duration
	now     func() time.Time
}

// WriteHeader passes the head's status on and marks the call sent; a 1xx
// (the proxy forwards a head's informational answers) is neither: the
// real answer, a 503 among them, is still to come.
func (cw *clientWriter) WriteHeader(status int) {
	if status < 200 {
		return
	}
	cw.c.sent, cw.c.status = true, status
	cw.ResponseWriter.WriteHeader(status)
}

func (cw *clientWriter) Write(b []byte) (int, error) {
	if !cw.c.sent {
		cw.WriteHeader(http.StatusOK)
	}
	_ = cw.rc.SetWriteDeadline(cw.now().Add(cw.timeout))
	n, err := cw.ResponseWriter.Write(b)
	cw.c.bytesOut += int64(n)
	if err != nil {
		cw.c.gone = true
	}
	return n, err
}

// Unwrap lets http.ResponseController (the proxy's flushes) reach the
// connection's own writer.
func (cw *clientWriter) Unwrap() http.ResponseWriter { return cw.ResponseWriter }

// unavailable answers the front door's own 503: the tier's view (reason,
// expected back) as nginx gives it, with Retry-After.
func (s *Server) unavailable(w http.ResponseWriter, c *call, ref *refusal) {
	v := ref.view
	body := tiers.UnavailableBody(v)
	retry := v.RetryAfter
	if ref.busy {
		body = busyBody(v.Tier)
		retry = 1
	}
	if retry <= 0 {
		retry = 1
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	w.Header().Set(TierHeader, "none")
	w.WriteHeader(http.StatusServiceUnavailable)
	n, _ := w.Write(body)
	c.status, c.bytesOut, c.outcome, c.why = http.StatusServiceUnavailable, int64(n), OutcomeUnavailable, ref.why
}

// busyBody is the 503 of a tier whose queue of held requests is full, or
// (tier "") of a front door holding as many request bytes as it may.
func busyBody(tier string) []byte {
	if tier == "" {
		return []byte(`{"error":{"message":"the front door is busy: too many request bytes are in flight; retry later","type":"service_unavailable","code":503},"reason":"busy: too many request bytes in flight","expected_back":null}` + "\n")
	}
	return []byte(fmt.Sprintf(`{"error":{"message":"tier %s is unavailable: too many requests are waiting for it; retry later","type":"service_unavailable","code":503},"tier":%q,"reason":"busy: too many requests waiting","expected_back":null}`+"\n", tier, tier))
}

// backup sends a request its tier cannot serve in time to the model its
// tier names as backup (backup_model), if that model has a head now (no
// hold for a backup). It reports whether it did.
func (s *Server) backup(w http.ResponseWriter, r *http.Request, c *call) bool {
	bm := s.tierCfg(c.tier).BackupModel
	if bm == "" {
		return false
	}
	tier, name := s.resolve(bm)
	if tier == "" || tier == c.tier {
		return false
	}
	h, _ := s.pick(s.tab.Load(), tier, name, "")
	if h == nil {
		return false
	}
	body := wire.Apply(c.body, wire.SetModel(c.body, c.keys, name))
	own := c.body
	c.body, c.backup = body, true
	if s.attempt(w, r, c, h) {
		if c.outcome == OutcomeAnswered {
			c.outcome = OutcomeBackup
		}
		return true
	}
	c.body, c.backup = own, false
	return false
}
