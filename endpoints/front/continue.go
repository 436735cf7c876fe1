package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"slurm-llm/endpoints/front/wire"
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
// What is continued and why (llama.cpp, measured 2026-11-24, the fake's
// FACTS.md Q8): the continuation says so explicitly
// (continue_final_message, add_generation_prompt false), which llama-server
// takes with or without --no-prefill-assistant and answers with the new
// tokens only (an implicit prefill repeats the prefill in its first delta:
// such an echo is stripped all the same). Sampling starts afresh: a
// continuation is a valid one, not the same bytes.
//
// Not continued (the stream ends with an error event saying why): a
// request asking for n > 1 choices or for logprobs (their continuity
// cannot be promised); one with a grammar, a JSON schema or a
// response_format (the grammar would restart mid-answer: structured output
// is not continued); one whose answer has begun a tool call (never resumed
// inside one); one answered by a backup model; past max_continuations.

// streamKind is which stream shape a splicer reads.
type streamKind int

const (
	streamNone   streamKind = iota // not a stream the front door reads
	streamChat                     // OpenAI chat chunks, ending in [DONE]
	streamRaw                      // llama-server's /completion events, ending with "stop": true
	streamText                     // OpenAI completion chunks (choices[].text): read, not continued
	streamInfill                   // /infill: /completion's events (read as streamRaw), not continued
)

// kindOf is the stream shape of a request path.
func kindOf(path string) streamKind {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		return streamChat
	case "/completion", "/completions":
		// llama-server serves both with /completion's handler: its own
		// events, not OpenAI's (FACTS.md Q10).
		return streamRaw
	case "/infill":
		return streamInfill
	case "/v1/completions":
		return streamText
	}
	return streamNone
}

// raw reports whether the kind's events are llama-server's own
// (/completion's: "content", "stop": true at the end, no [DONE]).
func (k streamKind) raw() bool { return k == streamRaw || k == streamInfill }

// counted reports whether the front door asks this kind's head for its
// usage chunk (stream_options.include_usage: OpenAI's shapes).
func (k streamKind) counted() bool { return k == streamChat || k == streamText }

// refusedBecause says why a request's stream will not be continued, from
// its body's keys alone; "" when it may be. What does not constrain the
// answer does not refuse it: "grammar": "", "response_format": {"type":
// "text"}, "logprobs": false.
func refusedBecause(kind streamKind, k wire.Keys) string {
	if kind == streamInfill {
		return "an /infill answer is not continued: its prompt is built from input_prefix and input_suffix"
	}
	if kind != streamChat && kind != streamRaw {
		return "only /v1/chat/completions and /completion streams are continued"
	}
	num := func(raw []byte) float64 { f, _ := wire.NumberValue(raw); return f }
	switch {
	case num(k.N) > 1:
		return "it asks for more than one choice (n)"
	case string(k.Logprobs) == "true" || num(k.Logprobs) > 0 || num(k.NProbs) > 0 || num(k.TopLogprobs) > 0:
		return "it asks for logprobs, whose continuity cannot be promised"
	case constrains(k.Grammar) || constrains(k.JSONSchema) || formatConstrains(k.ResponseFormat):
		return "structured output (a grammar, a JSON schema, a response_format) is not continued: its grammar would start over mid-answer"
	}
	return ""
}

// constrains reports whether a grammar or schema value constrains the
// answer: anything but absent, null, false, "" or {}.
func constrains(raw []byte) bool {
	switch string(bytes.Join(bytes.Fields(raw), nil)) {
	case "", "null", "false", `""`, "{}":
		return false
	}
	return true
}

// formatConstrains reports whether a response_format constrains the
// answer: any but {"type": "text"} (or none).
func formatConstrains(raw []byte) bool {
	if wire.IsNull(raw) {
		return false
	}
	var f struct {
		Type string `json:"type"`
	}
	return !(json.Unmarshal(raw, &f) == nil && f.Type == "text")
}

// splicer is the client's view of a streamed answer: the head's body,
// read event by event, passed on as it came (the first head's bytes
// unchanged), continued on another head when it is cut.
type splicer struct {
	s      *Server
	c      *call
	ctx    context.Context
	kind   streamKind
	refuse string // why it is not continued; "" when it may be

	cur     io.ReadCloser
	rd      *bufio.Reader
	head    *head // the head read from now (acquired by the splicer after a switch)
	spliced bool  // reading a continuation: events are rewritten
	out     bytes.Buffer
	end     bool   // nothing more: out then EOF
	ev      []byte // the event being read (reused)
	data    []byte // a multi-line event's data, joined (reused)

	// What the client has received.
	taken       int // events taken (any head): a stream is never moved before its first
	id, model   string
	created     json.RawMessage
	content     []byte
	reasoning   []byte
	tokens      int
	finished    bool // a finish reason (chat) or "stop": true (/completion)
	toolCall    bool
	beforeSplit int    // tokens the client had when the current continuation began
	echo        string // text a continuation's first delta may repeat
	cutAt       time.Time
	heads       []string
	// savesFor is the head whose drain was asked whether it saves its
	// slots (restore.go, drainSaves), saves the answer; awaitSave: the
	// next continuation waits for the conversation's slot to be saved.
	savesFor  *head
	saves     bool
	awaitSave bool

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
	sp := &splicer{s: s, c: c, ctx: c.ctx, kind: c.kind, cur: body, rd: rd}
	if why := refusedBecause(c.kind, c.keys); why != "" {
		sp.refuse = why
	} else if c.backup {
		sp.refuse = "it was answered by a backup model"
	} else if !s.tierCfg(c.tier).Continue {
		sp.refuse = "continuation is off for tier " + c.tier
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
		sp.ev, err = readEvent(sp.rd, sp.ev[:0])
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
		sp.ev, _ = readEvent(sp.rd, sp.ev[:0])
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

// readEvent appends one SSE event (up to and with its blank line) to ev;
// at the stream's end it returns what it read and the error.
func readEvent(rd *bufio.Reader, ev []byte) ([]byte, error) {
	start := len(ev) // where the line being read begins in ev
	for {
		chunk, err := rd.ReadSlice('\n')
		ev = append(ev, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			// The same line goes on: a line longer than the reader is read
			// in pieces, and the '\n' that ends it is not a blank line of
			// its own (a line of exactly the buffer's size read that way
			// ended its event early, and the client joined it to the next).
			continue
		}
		if err != nil {
			return ev, err
		}
		line := ev[start:]
		start = len(ev)
		switch {
		case len(bytes.TrimSpace(line)) == 0 && len(bytes.TrimSpace(ev)) > 0:
			return ev, nil
		case len(bytes.TrimSpace(ev)) == 0:
			ev, start = ev[:0], 0 // blank lines between events
		}
	}
}

// sseEvent is what the splicer reads of one server-sent event.
type sseEvent struct {
	// data is the event's data: its data lines' values joined by '\n'
	// (a slice of the event itself when it has one); nil when none.
	data []byte
	// failed is set by an "event: error" line, or by an "error:" field,
	// which llama-server sent for in-stream errors before it sent them as
	// data: either is the head's own end of its answer.
	failed bool
}

// parseEvent reads an event's fields (SSE: "field: value" lines, ":"
// comments); joined is reused for an event of several data lines.
func parseEvent(ev []byte, joined []byte) (sseEvent, []byte) {
	var e sseEvent
	lines := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			if lines++; lines == 1 {
				e.data = value
				continue
			}
			if lines == 2 {
				joined = append(joined[:0], e.data...)
			}
			joined = append(append(joined, '\n'), value...)
			e.data = joined
		case "event":
			e.failed = e.failed || string(bytes.TrimSpace(value)) == "error"
		case "error":
			e.failed = true
		}
	}
	return e, joined
}

// streamEnded is the head's stream ending (err io.EOF, or a broken
// connection): the answer is over if it finished, else it is continued or
// ends with an error event saying why.
func (sp *splicer) streamEnded(err error) {
	sp.closeCur()
	if sp.finished {
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
	if sp.refuse != "" || sp.finished || sp.toolCall || h == nil || !sp.s.draining(h) || sp.out.Len() > 0 {
		return false
	}
	if sp.taken == 0 || sp.eventBuffered() {
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
	case sp.toolCall:
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
	body, err := sp.continuation(h, slot)
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
	sp.spliced, sp.beforeSplit, sp.echo = true, sp.tokens, string(sp.content)
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
	return out
}

// continuation is the request to send again: with the answer so far as
// the assistant's message to continue (chat) or appended to the prompt
// (/completion), and the token limit lowered by what was generated (as h
// tokenizes it, or by the chunks counted when it cannot say); pinned to
// slot (id_slot) when h restored the conversation's saved slot there
// (restore.go; -1: none).
func (sp *splicer) continuation(h *head, slot int) ([]byte, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(sp.c.body, &body); err != nil {
		return nil, errors.New("the request is not a JSON object")
	}
	set := func(k string, v any) { body[k], _ = json.Marshal(v) }
	if slot >= 0 {
		set("id_slot", slot)
		set("cache_prompt", true)
	}
	used := -1
	for _, key := range []string{"max_tokens", "max_completion_tokens", "n_predict"} {
		var limit int
		if json.Unmarshal(body[key], &limit) == nil && limit > 0 {
			if used < 0 {
				used = sp.generated(h)
			}
			if limit-used <= 0 {
				return nil, errors.New("its token limit is reached")
			}
			set(key, limit-used)
		}
	}
	if sp.kind.raw() {
		var prompt string
		if err := json.Unmarshal(body["prompt"], &prompt); err != nil {
			return nil, errors.New("its prompt is not a plain string")
		}
		set("prompt", prompt+string(sp.content))
		return json.Marshal(body)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		return nil, errors.New("its messages cannot be read")
	}
	text, reasoning := string(sp.content), string(sp.reasoning)
	if n := len(msgs); n > 0 && roleOf(msgs[n-1]) == "assistant" {
		// The client's own prefill: the answer went on from it (a head that
		// repeats it sent it first: it is in text already).
		prefill := textOf(msgs[n-1]["content"])
		if !strings.HasPrefix(text, prefill) {
			text = prefill + text
		}
		msgs = msgs[:n-1]
	}
	last := map[string]any{"role": "assistant", "content": text}
	mode := "content"
	if reasoning != "" {
		last["reasoning_content"] = reasoning
		if text == "" {
			mode = "reasoning_content"
		}
	}
	raw, _ := json.Marshal(last)
	var lastRaw map[string]json.RawMessage
	_ = json.Unmarshal(raw, &lastRaw)
	set("messages", append(msgs, lastRaw))
	set("continue_final_message", mode)
	set("add_generation_prompt", false)
	return json.Marshal(body)
}

// textOf is a message's content as text: a string, or the text parts of
// an array of parts (OpenAI's [{"type":"text","text":…}]) joined.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// tokenizeTimeout bounds asking a head how many tokens the answer so far
// has.
const tokenizeTimeout = 2 * time.Second

// generated is how many tokens the client received: as h's /tokenize
// counts the text (a chunk may carry more than one token: llama-server
// holds back a token that ends inside a UTF-8 character and sends it with
// the next), or the chunks counted when h does not answer.
func (sp *splicer) generated(h *head) int {
	text := string(sp.reasoning) + string(sp.content)
	ctx, cancel := context.WithTimeout(sp.ctx, tokenizeTimeout)
	defer cancel()
	q, _ := json.Marshal(map[string]any{"content": text, "add_special": false})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.addr+"/tokenize", bytes.NewReader(q))
	req.Header = headerForHead(sp.c.header)
	resp, err := sp.s.opts.Transport.RoundTrip(req)
	if err != nil {
		return sp.tokens
	}
	defer resp.Body.Close()
	var doc struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&doc) != nil || doc.Tokens == nil {
		return sp.tokens
	}
	return max(len(doc.Tokens), sp.tokens)
}

func roleOf(m map[string]json.RawMessage) string {
	var r string
	_ = json.Unmarshal(m["role"], &r)
	return r
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
		if !sp.end && !sp.finished {
			sp.c.gone = true // closed before its end: the client left
		}
		if !sp.c.tally.Counted && sp.tokens > 0 {
			// The head gave no usage: the tokens the client got, counted by
			// their chunks (a prompt unknown).
			sp.c.tally.Completion, sp.c.tally.Counted = sp.tokens, true
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

// take passes one event on, noting what the client has received; a
// continuation's events are rewritten into the first answer's.
func (sp *splicer) take(ev []byte) {
	sp.taken++
	var e sseEvent
	e, sp.data = parseEvent(ev, sp.data)
	switch {
	case e.failed:
		// The head ended the answer with an error of its own: its
		// answer's end, not a cut to continue.
		sp.finished, sp.c.tally.Finish = true, wire.FinishError
		sp.out.Write(ev)
		return
	case e.data == nil:
		sp.out.Write(ev) // a comment, or a field the splicer does not read
		return
	case string(e.data) == "[DONE]":
		sp.finished = true
		sp.out.Write(ev)
		return
	}
	if sp.kind.raw() {
		sp.takeRaw(ev, e.data)
		return
	}
	sp.takeChat(ev, e.data)
}

// chunkInfo is what the splicer reads of a chat chunk without decoding it:
// raw JSON values, nil when absent.
type chunkInfo struct {
	id, model, created []byte
	// content and reasoning are the first choice's delta texts (raw JSON
	// strings); finish is set when any choice has a finish reason.
	content, reasoning []byte
	toolCall, finish   bool
	finishReason       []byte // the first finish reason (raw)
	failed             bool   // an "error" key: the head's own end
	// usage is the chunk's usage (raw); usageOnly is set for the chunk
	// that holds it alone ("choices": []).
	usage     []byte
	usageOnly bool
}

// scanChat reads a chat chunk's keys; ok is false when data is not a JSON
// object.
func scanChat(data []byte) (ci chunkInfo, ok bool) {
	err := wire.EachKey(data, func(key, val []byte, _ int) bool {
		switch {
		case wire.KeyIs(key, "choices"):
			ci.usageOnly = string(bytes.TrimSpace(val)) == "[]"
			first := true
			wire.EachElem(val, func(choice []byte) bool {
				_ = wire.EachKey(choice, func(key, val []byte, _ int) bool {
					switch {
					case wire.KeyIs(key, "delta") && first:
						_ = wire.EachKey(val, func(key, val []byte, _ int) bool {
							switch {
							case wire.KeyIs(key, "content"):
								ci.content = val
							case wire.KeyIs(key, "reasoning_content"):
								ci.reasoning = val
							case wire.KeyIs(key, "tool_calls"):
								ci.toolCall = !wire.IsNull(val) && string(val) != "[]"
							}
							return true
						})
					case wire.KeyIs(key, "text") && first: // a completion's chunk
						ci.content = val
					case wire.KeyIs(key, "finish_reason") && !wire.IsNull(val):
						if !ci.finish {
							ci.finishReason = val
						}
						ci.finish = true
					}
					return true
				})
				first = false
				return true
			})
		case wire.KeyIs(key, "id"):
			ci.id = val
		case wire.KeyIs(key, "model"):
			ci.model = val
		case wire.KeyIs(key, "created"):
			ci.created = val
		case wire.KeyIs(key, "error"):
			ci.failed = true
		case wire.KeyIs(key, "usage") && !wire.IsNull(val):
			ci.usage = val
		}
		return true
	})
	ci.usageOnly = ci.usageOnly && ci.usage != nil
	return ci, err == nil
}

// takeChat handles one chat chunk: passed on as it came from the first
// head; a continuation's rewritten into the first answer's.
func (sp *splicer) takeChat(ev, data []byte) {
	if !sp.spliced {
		ci, ok := scanChat(data)
		if ok && ci.failed {
			sp.finished, sp.c.tally.Finish = true, wire.FinishError // the head's own error: its answer's end
		}
		if ok && !ci.failed {
			if sp.id == "" {
				sp.id, _ = wire.StringValue(ci.id)
				sp.model, _ = wire.StringValue(ci.model)
				sp.created = bytes.Clone(ci.created)
			}
			sp.note(ci.content, ci.reasoning, ci.toolCall, ci.finish)
			sp.noteFinish(ci.finishReason)
			if ci.usage != nil && !sp.takeUsage(ci.usage, ci.usageOnly) {
				return
			}
		}
		sp.out.Write(ev)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		sp.out.Write(ev) // not ours to judge
		return
	}
	if _, failed := obj["error"]; failed {
		sp.finished, sp.c.tally.Finish = true, wire.FinishError
		sp.out.Write(ev)
		return
	}
	sp.spliceChat(obj)
}

// takeUsage records an answer's usage; it reports whether the chunk that
// holds it goes to the client: not a chunk of usage alone (no choices)
// that the front door asked for and the client did not.
func (sp *splicer) takeUsage(raw []byte, alone bool) bool {
	sp.c.tally.TakeUsage(raw)
	return !alone || !sp.c.usageAsked
}

// noteFinish records a chunk's finish reason.
func (sp *splicer) noteFinish(raw []byte) {
	if r, ok := wire.StringValue(raw); ok && r != "" {
		sp.c.tally.Finish = r
	}
}

// spliceChat rewrites a continuation's chunk into the first answer's: its
// id, created and model; no second role chunk; the echo of the prefill, if
// any, dropped; usage counted for the whole answer.
func (sp *splicer) spliceChat(obj map[string]json.RawMessage) {
	var raw []map[string]json.RawMessage
	_ = json.Unmarshal(obj["choices"], &raw)
	keep := raw[:0]
	for _, ch := range raw {
		delta := map[string]json.RawMessage{}
		_ = json.Unmarshal(ch["delta"], &delta)
		delete(delta, "role")
		if c, ok := delta["content"]; ok && !wire.IsNull(c) {
			text, _ := wire.StringValue(c)
			if sp.echo != "" {
				text = strings.TrimPrefix(text, sp.echo)
				sp.echo = ""
			}
			if text == "" {
				delete(delta, "content")
			} else {
				delta["content"], _ = json.Marshal(text)
			}
		}
		finish := !wire.IsNull(ch["finish_reason"])
		if finish {
			sp.noteFinish(ch["finish_reason"])
		}
		if len(delta) == 0 && !finish {
			continue // only the role, or only the echo
		}
		ch["delta"], _ = json.Marshal(delta)
		keep = append(keep, ch)
		tc := delta["tool_calls"]
		sp.note(delta["content"], delta["reasoning_content"], !wire.IsNull(tc) && string(tc) != "[]", finish)
	}
	if len(raw) > 0 && len(keep) == 0 {
		return
	}
	obj["choices"], _ = json.Marshal(keep)
	sp.restamp(obj)
	if u, ok := obj["usage"]; ok && !wire.IsNull(u) {
		obj["usage"] = sp.usage(u)
		if !sp.takeUsage(obj["usage"], len(raw) == 0) {
			return
		}
	}
	sp.emit(obj)
}

// note records a delta the client receives (raw JSON strings).
func (sp *splicer) note(content, reasoning []byte, toolCall, finished bool) {
	text := wire.AppendText(&sp.content, content)
	if wire.AppendText(&sp.reasoning, reasoning) || text {
		sp.tokens++
		sp.tokenSeen()
	}
	sp.toolCall = sp.toolCall || toolCall
	sp.finished = sp.finished || finished
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

// takeRaw handles one /completion event; its last one (stop) carries
// the answer's tokens and why it stopped.
func (sp *splicer) takeRaw(ev, data []byte) {
	var content, failed, predicted, evaluated, stopType []byte
	var stop bool
	err := wire.EachKey(data, func(key, val []byte, _ int) bool {
		switch {
		case wire.KeyIs(key, "content"):
			content = val
		case wire.KeyIs(key, "stop"):
			stop = string(val) == "true"
		case wire.KeyIs(key, "error"):
			failed = val
		case wire.KeyIs(key, "tokens_predicted"):
			predicted = val
		case wire.KeyIs(key, "tokens_evaluated"):
			evaluated = val
		case wire.KeyIs(key, "stop_type"):
			stopType = val
		}
		return true
	})
	if err != nil || failed != nil {
		if failed != nil {
			sp.finished, sp.c.tally.Finish = true, wire.FinishError
		}
		sp.out.Write(ev)
		return
	}
	if wire.AppendText(&sp.content, content) {
		sp.tokens++
		sp.tokenSeen()
	}
	if stop {
		sp.finished = true
		sp.c.tally.Finish = rawFinish(stopType)
		p, _ := wire.NumberValue(evaluated)
		n, _ := wire.NumberValue(predicted)
		if sp.spliced {
			p, n = max(p-float64(sp.beforeSplit), 0), n+float64(sp.beforeSplit)
		}
		sp.c.tally.Prompt, sp.c.tally.Completion, sp.c.tally.Counted = int(p), int(n), predicted != nil
	}
	if !sp.spliced {
		sp.out.Write(ev)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		sp.out.Write(ev)
		return
	}
	for key, add := range map[string]int{"tokens_predicted": sp.beforeSplit, "tokens_evaluated": -sp.beforeSplit} {
		var n int
		if json.Unmarshal(obj[key], &n) == nil && obj[key] != nil {
			obj[key], _ = json.Marshal(max(n+add, 0))
		}
	}
	if sp.model != "" {
		obj["model"], _ = json.Marshal(sp.model)
	}
	sp.emit(obj)
}

// rawFinish is a /completion's stop_type as a chat finish reason: "limit"
// (n_predict reached) is "length", an end of stream or a stop word "stop".
func rawFinish(stopType []byte) string {
	if t, _ := wire.StringValue(stopType); t == "limit" {
		return wire.FinishLength
	}
	return wire.FinishStop
}

// restamp gives a continuation's chunk the first answer's id, created and
// model.
func (sp *splicer) restamp(obj map[string]json.RawMessage) {
	if sp.id != "" {
		obj["id"], _ = json.Marshal(sp.id)
	}
	if sp.model != "" {
		obj["model"], _ = json.Marshal(sp.model)
	}
	if sp.created != nil {
		obj["created"] = sp.created
	}
}

// usage is a continuation's usage as the client's request's: the tokens
// generated before the split count as completion, not as prompt (the
// continuation's prompt held them as its prefill; re-tokenized, so the
// split is approximate by the tokenizer's view of that text).
func (sp *splicer) usage(raw json.RawMessage) json.RawMessage {
	var u map[string]json.RawMessage
	if json.Unmarshal(raw, &u) != nil {
		return raw
	}
	var prompt, completion int
	_ = json.Unmarshal(u["prompt_tokens"], &prompt)
	_ = json.Unmarshal(u["completion_tokens"], &completion)
	prompt, completion = max(prompt-sp.beforeSplit, 0), completion+sp.beforeSplit
	u["prompt_tokens"], _ = json.Marshal(prompt)
	u["completion_tokens"], _ = json.Marshal(completion)
	u["total_tokens"], _ = json.Marshal(prompt + completion)
	out, _ := json.Marshal(u)
	return out
}

// emit writes a rewritten event.
func (sp *splicer) emit(obj map[string]json.RawMessage) {
	b, err := json.Marshal(obj)
	if err != nil {
		return
	}
	sp.out.WriteString("data: ")
	sp.out.Write(b)
	sp.out.WriteString("\n\n")
}
