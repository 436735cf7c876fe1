package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"slurm-llm/endpoints/front/kvrestore"
	"slurm-llm/endpoints/front/stream"
)

// A stream cut before its end (its head stopped by a drain's deadline,
// died, or lost its node) is continued on another head of the same model:
// the same request again, with the text already sent as the assistant's
// partial message (chat) or appended to the prompt (/completion), and the
// new head's events spliced into the client's open answer under the first
// answer's id, created and model, with no repeated text and one final
// finish and [DONE]. A stream whose head starts to drain is moved the same
// way at the next token, when another head serves the model (the drain
// then ends sooner, and science gets its node sooner).
//
// The events are read, and a continuation's rewritten, by package
// stream (stream.Answer, which also builds the continuation's request);
// this file is the network's side: when a stream is cut or moved, which
// head continues it, the hold, the metrics, the error event.
//
// Not continued (the stream ends with an error event saying why): a
// request stream.Refused refuses (n > 1 choices, logprobs, structured
// output); one whose answer has begun a tool call (never resumed inside
// one); one answered by a backup model; past max_continuations.

// splicer is the client's view of a streamed answer: the head's body,
// read event by event, passed on as it came (the first head's bytes
// unchanged), continued on another head when it is cut.
type splicer struct {
	s      *Server
	c      *call
	ctx    context.Context
	kind   stream.Kind
	refuse string // why it is not continued; "" when it may be

	cur  io.ReadCloser
	rd   *bufio.Reader
	head *head // the head read from now (acquired by the splicer after a switch)
	out  bytes.Buffer
	end  bool   // nothing more: out then EOF
	ev   []byte // the event being read (reused)

	// ans is what the client has received (and rewrites a continuation's
	// events into the first answer's).
	ans   stream.Answer
	cutAt time.Time
	heads []string
	// savesFor is the head whose drain was asked whether it saves its
	// slots (restore.go, drainSaves), saves the answer; restorer restores
	// the conversation's slot, waiting for the save it was told of.
	savesFor *head
	saves    bool
	restorer kvrestore.Restorer

	// Token timing (llm_front_time_to_first_token_seconds and
	// llm_front_inter_token_seconds): the last token's time, zero before
	// the first and after a continuation's gap.
	lastToken     time.Time
	ttft, itl     prometheus.Observer
	firstObserved bool

	closeOnce sync.Once
}

// newSplicer wraps the first head's streamed answer.
func (s *Server) newSplicer(c *call, body io.ReadCloser) *splicer {
	rd := eventReaders.Get().(*bufio.Reader)
	rd.Reset(body)
	sp := &splicer{s: s, c: c, ctx: c.ctx, kind: c.kind, cur: body, rd: rd, ans: stream.NewAnswer(c.kind, &c.tally, c.usageAsked)}
	if why := stream.Refused(c.kind, c.keys); why != "" {
		sp.refuse = why
	} else if c.backup {
		sp.refuse = "it was answered by a backup model"
	} else if !s.tierCfg(c.tier).Continue {
		sp.refuse = "continuation is off for tier " + c.tier
	} else {
		sp.ans.KeepIDs()
	}
	if c.head != nil {
		sp.heads = append(sp.heads, c.head.addr)
	}
	sp.ttft = s.metrics.ttft.WithLabelValues(c.tier, c.model)
	sp.itl = s.metrics.itl.WithLabelValues(c.tier, c.model)
	return sp
}

// Read gives the client whole events: the next ones from the head, or,
// when the head's stream ended before its finish, those of its
// continuation.
func (sp *splicer) Read(p []byte) (int, error) {
	for sp.out.Len() == 0 {
		if sp.end {
			return 0, io.EOF
		}
		if sp.drainingSwitch() {
			continue
		}
		var err error
		sp.ev, err = stream.ReadEvent(sp.rd, sp.ev[:0])
		if len(sp.ev) > 0 {
			sp.take(sp.ev)
		}
		if err != nil {
			sp.streamEnded(err)
		}
	}
	// The events the head sent together (a burst of tokens in one read)
	// go on together: one write to the client, as nginx would.
	for sp.out.Len() < len(p) && !sp.end && sp.cur != nil && sp.eventBuffered() {
		sp.ev, _ = stream.ReadEvent(sp.rd, sp.ev[:0])
		sp.take(sp.ev)
	}
	return sp.out.Read(p)
}

// eventBuffered reports whether a whole event is already read from the
// head, so that taking it does not wait.
func (sp *splicer) eventBuffered() bool {
	b, _ := sp.rd.Peek(sp.rd.Buffered())
	b = bytes.TrimLeft(b, "\r\n") // blank lines between events are no event
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// streamEnded is the head's stream ending (err io.EOF, or a broken
// connection): the answer is over if it finished, else it is continued or
// ends with an error event saying why.
func (sp *splicer) streamEnded(err error) {
	sp.closeCur()
	if sp.ans.Finished() {
		sp.end = true
		return
	}
	if sp.ctx.Err() != nil {
		sp.c.gone = true // the client left: nothing to blame on the head
		sp.end = true
		return
	}
	sp.cutAt = sp.s.now()
	sp.s.metrics.upErrors.WithLabelValues(sp.c.tier, "mid_answer").Inc()
	if h := sp.current(); h != nil {
		sp.s.markFailing(h)
	}
	why := fmt.Sprintf("its head stopped before the answer's end (%v)", err)
	sp.continueOrFail(why)
}

// current is the head the splicer reads from now.
func (sp *splicer) current() *head {
	if sp.head != nil {
		return sp.head
	}
	return sp.c.head
}

// drainingSwitch moves the stream, between two events, off a head whose
// endpoint now drains, when another head serves the model: the drain then
// waits for nothing of ours. It reports whether it switched. Never before
// the answer's first event (the client would get the next head's answer
// without its role chunk, which a continuation's splice drops), and never
// while a whole event the head sent is buffered (it is the client's: the
// move comes after it).
func (sp *splicer) drainingSwitch() bool {
	h := sp.current()
	if sp.refuse != "" || sp.ans.Finished() || sp.ans.ToolCall() || h == nil || !sp.s.draining(h) || sp.out.Len() > 0 {
		return false
	}
	if sp.ans.Taken() == 0 || sp.eventBuffered() {
		return false
	}
	if sp.c.continued >= sp.s.cfg.Load().MaxContinuations {
		return false
	}
	next, _ := sp.s.pick(sp.s.tab.Load(), sp.c.tier, sp.c.model, "")
	saves := sp.drainSaves(h)
	if next == nil && !saves {
		return false // nowhere to go: stay until the drain ends it
	}
	sp.closeCur() // the old head sees its client leave: its slot is free
	sp.cutAt = sp.s.now()
	if next == nil {
		// Its drain saves the slot once idle (restore.go): the stream
		// waits, held, for a head to restore it on, rather than be cut
		// by the stop with its slot unsaved.
		sp.c.moved++
		sp.continueOrFail("its head drains and saves its slot")
		return true
	}
	if sp.start(next, "its head drains") {
		sp.c.moved++
		return true
	}
	if !sp.end { // the head it was moved to refused: as after a cut
		sp.continueOrFail("its head drains; the head it was moved to refused")
	}
	return true
}

// continueOrFail continues the answer on another head of the model
// (holding within the tier's hold while none is routed), or ends it with
// an error event saying why.
func (sp *splicer) continueOrFail(why string) {
	cfg := sp.s.cfg.Load()
	switch {
	case sp.refuse != "":
		sp.fail(resultRefused, why+"; not continued: "+sp.refuse)
		return
	case sp.ans.ToolCall():
		sp.fail(resultRefused, why+"; not continued: the answer had begun a tool call")
		return
	case sp.c.continued >= cfg.MaxContinuations:
		sp.fail(resultRefused, fmt.Sprintf("%s; not continued: it was continued %d times already", why, sp.c.continued))
		return
	}
	hold := sp.s.tierCfg(sp.c.tier).Hold
	sp.c.deadline = sp.s.now().Add(hold)
	for tries := 0; tries < maxAttempts; tries++ {
		h, ref := sp.s.acquire(sp.ctx, sp.c)
		if h == nil {
			if ref == nil {
				sp.c.gone = true
				sp.end = true // the client left while held
				return
			}
			sp.fail(resultFailed, why+"; no head of its model came back in time: "+ref.why)
			return
		}
		if sp.start(h, why) || sp.end {
			return
		}
	}
	sp.fail(resultFailed, why+"; the heads tried for its continuation failed")
}

// Continuation results, the result label of llm_front_continuations_total.
const (
	resultContinued = "continued"
	resultFailed    = "failed"
	resultRefused   = "refused"
)

// start sends the continuation to h and reads from it next. It reports
// whether h answered with a stream; on false h was released and marked
// failing (or the answer ended: end is set). A continuation counts once a
// head took it.
func (sp *splicer) start(h *head, why string) bool {
	slot := sp.restoreSlot(h)
	body, err := sp.ans.Continuation(sp.c.body, slot, func() int { return sp.generated(h) })
	if err != nil {
		sp.s.release(h)
		sp.fail(resultRefused, why+"; not continued: "+err.Error())
		return false
	}
	// A held continuation lets the next held request go once written, not
	// once answered (a head sends a stream's header only after the
	// prompt, which holds the whole answer so far).
	ctx := httptrace.WithClientTrace(sp.ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sp.c.written() }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.addr+sp.c.path, bytes.NewReader(body))
	req.Header = headerForHead(sp.c.header)
	req.ContentLength = int64(len(body))
	resp, err := sp.s.opts.Transport.RoundTrip(req)
	sp.c.written() // and when it could not be written
	if err == nil && (resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")) {
		resp.Body.Close()
		err = fmt.Errorf("head answered %s", resp.Status)
	}
	if err != nil {
		sp.s.release(h)
		if sp.ctx.Err() != nil {
			sp.c.gone, sp.end = true, true
			return false
		}
		sp.s.markFailing(h)
		sp.s.log.Debug("continuation refused by a head", "tier", sp.c.tier, "head", h.addr, "error", err)
		return false
	}
	sp.c.continued++
	sp.heads = append(sp.heads, h.addr)
	sp.releaseHead()
	if !sp.c.headReleased && sp.c.head != nil { // the attempt's own head is left: its slot is free
		sp.c.headReleased = true
		sp.s.release(sp.c.head)
	}
	sp.head, sp.cur = h, resp.Body
	sp.rd.Reset(resp.Body)
	sp.ans.Splice()
	sp.lastToken = time.Time{} // the pause is llm_front_continuation_pause_seconds', not a token's
	fmt.Fprintf(&sp.out, ": slurm-llm: continued on %s %s (%s)\n\n", sp.c.tier, h.addr, oneLine(why))
	restored := slot >= 0
	if restored {
		sp.c.restored++
	}
	pause := sp.s.now().Sub(sp.cutAt)
	sp.c.pause += pause
	sp.s.metrics.continued.WithLabelValues(sp.c.tier, resultContinued, strconv.FormatBool(restored)).Inc()
	sp.s.metrics.pause.WithLabelValues(sp.c.tier).Observe(pause.Seconds())
	return true
}

// hopHeaders are connection-level headers, never passed on (RFC 9110
// 7.6.1), with the front door's own and the body's length.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Content-Length", HoldHeader}

// headerForHead is the client's request header as a continuation sends it
// to a head: the client's own (its Authorization for a head run with
// --api-key, its Content-Type), without hop-by-hop headers.
func headerForHead(in http.Header) http.Header {
	out := in.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, k := range hopHeaders {
		out.Del(k)
	}
	if out.Get("Content-Type") == "" {
		out.Set("Content-Type", "application/json")
	}
	replayable(out)
	return out
}

// tokenizeTimeout bounds asking a head how many tokens the answer so far
// has.
const tokenizeTimeout = 2 * time.Second

// generated is how many tokens the client received: its token ids when
// a /completion's events named them all; else as h's /tokenize counts the
// text (a chunk may carry more than one token: llama-server holds back a
// token that ends inside a UTF-8 character and sends it with the next),
// or the chunks counted when h does not answer.
func (sp *splicer) generated(h *head) int {
	if n, ok := sp.ans.IDsKnown(); ok {
		return n
	}
	text := sp.ans.Text()
	ctx, cancel := context.WithTimeout(sp.ctx, tokenizeTimeout)
	defer cancel()
	q, _ := json.Marshal(map[string]any{"content": text, "add_special": false})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.addr+"/tokenize", bytes.NewReader(q))
	req.Header = headerForHead(sp.c.header)
	resp, err := sp.s.opts.Transport.RoundTrip(req)
	if err != nil {
		return sp.ans.Tokens()
	}
	defer resp.Body.Close()
	var doc struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&doc) != nil || doc.Tokens == nil {
		return sp.ans.Tokens()
	}
	return max(len(doc.Tokens), sp.ans.Tokens())
}

// fail ends the answer with an error event saying why (an answer cut and
// not continued), counted once under result.
func (sp *splicer) fail(result, why string) {
	sp.s.metrics.continued.WithLabelValues(sp.c.tier, result, "false").Inc()
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the answer was cut: " + why,
		"type": "server_error", "code": http.StatusBadGateway}})
	fmt.Fprintf(&sp.out, "data: %s\n\n", b)
	sp.c.outcome, sp.c.why, sp.c.tally.Finish = OutcomeCut, why, finishCut
	sp.end = true
}

// Close ends the read: the current body is closed (the head's request
// is cancelled if it is still going) and a continuation's head released.
func (sp *splicer) Close() error {
	sp.closeOnce.Do(func() {
		if !sp.end && !sp.ans.Finished() {
			sp.c.gone = true // closed before its end: the client left
		}
		if !sp.c.tally.Counted && sp.ans.Tokens() > 0 {
			// The head gave no usage: the tokens the client got, counted by
			// their chunks (a prompt unknown).
			sp.c.tally.Completion, sp.c.tally.Counted = sp.ans.Tokens(), true
		}
		sp.closeCur()
		sp.releaseHead()
		sp.c.heads = sp.heads
		sp.rd.Reset(nil)
		eventReaders.Put(sp.rd)
		sp.rd = nil
	})
	return nil
}

// eventReaders lend splicers their readers of a head's events (16 KiB
// each) instead of allocating one per stream.
var eventReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

func (sp *splicer) closeCur() {
	if sp.cur != nil {
		sp.cur.Close()
		sp.cur = nil
	}
}

// releaseHead releases the continuation head the splicer acquired.
func (sp *splicer) releaseHead() {
	if sp.head != nil {
		sp.s.release(sp.head)
		sp.head = nil
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// take passes one event on (stream.Answer.Take) and times the tokens it
// brought.
func (sp *splicer) take(ev []byte) {
	for n := sp.ans.Take(ev, &sp.out); n > 0; n-- {
		sp.tokenSeen()
	}
}

// tokenSeen times a token reaching the client: the first from the
// request's sending to its head, the others from the one before.
func (sp *splicer) tokenSeen() {
	now := sp.s.now()
	switch {
	case !sp.firstObserved:
		sp.firstObserved = true
		sp.ttft.Observe(now.Sub(sp.c.dispatched).Seconds())
	case !sp.lastToken.IsZero():
		sp.itl.Observe(now.Sub(sp.lastToken).Seconds())
	}
	sp.lastToken = now
}
