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
	"strings"
	"sync"
	"time"
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
	streamNone streamKind = iota // not a stream the front door continues
	streamChat                   // OpenAI chat chunks, ending in [DONE]
	streamRaw                    // llama-server's /completion events, ending with "stop": true
)

// kindOf is the stream shape of a request path.
func kindOf(path string) streamKind {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		return streamChat
	case "/completion":
		return streamRaw
	}
	return streamNone
}

// refusedBecause says why a request's stream will not be continued, from
// its body alone; "" when it may be.
func refusedBecause(kind streamKind, body map[string]json.RawMessage) string {
	if kind == streamNone {
		return "only /v1/chat/completions and /completion streams are continued"
	}
	num := func(key string) float64 {
		var v float64
		_ = json.Unmarshal(body[key], &v)
		return v
	}
	truthy := func(key string) bool {
		raw, ok := body[key]
		return ok && string(raw) != "false" && string(raw) != "null" && string(raw) != "0"
	}
	switch {
	case num("n") > 1:
		return "it asks for more than one choice (n)"
	case truthy("logprobs") || num("n_probs") > 0 || truthy("top_logprobs"):
		return "it asks for logprobs, whose continuity cannot be promised"
	case truthy("grammar") || truthy("json_schema") || truthy("response_format"):
		return "structured output (a grammar, a JSON schema, a response_format) is not continued: its grammar would start over mid-answer"
	}
	return ""
}

// splicer is the client's view of a streamed answer: the head's body,
// read event by event, passed on as it came (the first head's bytes
// unchanged), continued on another head when it is cut.
type splicer struct {
	s      *Server
	c      *call
	ctx    context.Context
	kind   streamKind
	body   map[string]json.RawMessage // the request, to send again
	refuse string                     // why it is not continued; "" when it may be

	cur     io.ReadCloser
	rd      *bufio.Reader
	head    *head // the head read from now (acquired by the splicer after a switch)
	spliced bool  // reading a continuation: events are rewritten
	out     bytes.Buffer
	end     bool // nothing more: out then EOF

	// What the client has received.
	id, model   string
	created     json.RawMessage
	content     strings.Builder
	reasoning   strings.Builder
	tokens      int
	finished    bool // a finish reason (chat) or "stop": true (/completion)
	toolCall    bool
	beforeSplit int    // tokens the client had when the current continuation began
	echo        string // text a continuation's first delta may repeat
	roleSeen    bool   // the first answer's role chunk went out
	cutAt       time.Time
	heads       []string

	closeOnce sync.Once
}

// newSplicer wraps the first head's streamed answer.
func (s *Server) newSplicer(c *call, body io.ReadCloser) *splicer {
	sp := &splicer{s: s, c: c, ctx: c.ctx, kind: c.kind, cur: body, rd: bufio.NewReaderSize(body, 16<<10)}
	if err := json.Unmarshal(c.body, &sp.body); err != nil {
		sp.refuse = "the request is not a JSON object"
	} else if why := refusedBecause(c.kind, sp.body); why != "" {
		sp.refuse = why
	} else if !s.tierCfg(c.tier).Continue {
		sp.refuse = "continuation is off for tier " + c.tier
	}
	if c.head != nil {
		sp.heads = append(sp.heads, c.head.addr)
	}
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
		ev, err := readEvent(sp.rd)
		if len(ev) > 0 {
			sp.take(ev)
		}
		if err != nil {
			sp.streamEnded(err)
		}
	}
	return sp.out.Read(p)
}

// readEvent reads one SSE event (up to and with its blank line); at the
// stream's end it returns what it read and the error.
func readEvent(rd *bufio.Reader) ([]byte, error) {
	var ev []byte
	for {
		line, err := rd.ReadSlice('\n')
		ev = append(ev, line...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return ev, err
		case len(bytes.TrimSpace(line)) == 0 && len(bytes.TrimSpace(ev)) > 0:
			return ev, nil
		case len(bytes.TrimSpace(ev)) == 0:
			ev = ev[:0] // blank lines between events
		}
	}
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
		sp.end = true // the client left
		return
	}
	sp.cutAt = sp.s.now()
	sp.s.metrics.upErrors.WithLabelValues(sp.c.tier, "mid_answer").Inc()
	if sp.head != nil {
		sp.head.failedUntil.Store(sp.s.now().Add(sp.s.cfg.Load().FailTimeout).UnixNano())
	} else if sp.c.head != nil {
		sp.c.head.failedUntil.Store(sp.s.now().Add(sp.s.cfg.Load().FailTimeout).UnixNano())
	}
	why := fmt.Sprintf("its head stopped before the answer's end (%v)", err)
	sp.continueOrFail(why)
}

// drainingSwitch moves the stream, between two events, off a head whose
// endpoint now drains, when another head serves the model: the drain then
// waits for nothing of ours. It reports whether it switched.
func (sp *splicer) drainingSwitch() bool {
	h := sp.head
	if h == nil {
		h = sp.c.head
	}
	if sp.refuse != "" || sp.finished || sp.toolCall || h == nil || !sp.s.draining(h) || sp.out.Len() > 0 {
		return false
	}
	if sp.c.continued >= sp.s.cfg.Load().MaxContinuations {
		return false
	}
	t := sp.s.tab.Load()
	next := sp.s.pick(t, sp.c.tier, sp.c.model)
	if next == nil {
		return false // nowhere to go: stay until the drain ends it
	}
	sp.closeCur() // the old head sees its client leave: its slot is free
	sp.cutAt = sp.s.now()
	sp.c.moved++
	sp.start(next, "its head drains")
	return true
}

// continueOrFail continues the answer on another head of the model
// (holding within the tier's hold while none is routed), or ends it with
// an error event saying why.
func (sp *splicer) continueOrFail(why string) {
	cfg := sp.s.cfg.Load()
	switch {
	case sp.refuse != "":
		sp.fail("continuation", why+"; not continued: "+sp.refuse)
		return
	case sp.toolCall:
		sp.fail("continuation", why+"; not continued: the answer had begun a tool call")
		return
	case sp.c.continued >= cfg.MaxContinuations:
		sp.fail("continuation", fmt.Sprintf("%s; not continued: it was continued %d times already", why, sp.c.continued))
		return
	}
	hold := sp.s.tierCfg(sp.c.tier).Hold
	sp.c.deadline = sp.s.now().Add(hold)
	for tries := 0; tries < maxAttempts; tries++ {
		h, ref := sp.s.acquire(sp.ctx, sp.c)
		if h == nil {
			if ref == nil {
				sp.end = true // the client left while held
				return
			}
			sp.s.metrics.continued.WithLabelValues(sp.c.tier, "failed").Inc()
			sp.fail("unavailable", why+"; no head of its model came back in time: "+ref.why)
			return
		}
		if sp.start(h, why) {
			return
		}
	}
	sp.s.metrics.continued.WithLabelValues(sp.c.tier, "failed").Inc()
	sp.fail("continuation", why+"; the heads tried for its continuation failed")
}

// start sends the continuation to h and reads from it next. It reports
// whether h answered with a stream; on false h was released and marked
// failing.
func (sp *splicer) start(h *head, why string) bool {
	sp.c.continued++
	sp.heads = append(sp.heads, h.addr)
	body, err := sp.continuation()
	if err != nil {
		sp.s.release(h)
		sp.fail("continuation", why+"; not continued: "+err.Error())
		return true
	}
	req, _ := http.NewRequestWithContext(sp.ctx, http.MethodPost, "http://"+h.addr+sp.c.path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Close = true // a stream's connection is not reused
	resp, err := sp.s.opts.Transport.RoundTrip(req)
	sp.c.written() // a held continuation: the next held request may go
	if err == nil && (resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")) {
		resp.Body.Close()
		err = fmt.Errorf("head answered %s", resp.Status)
	}
	if err != nil {
		sp.s.release(h)
		h.failedUntil.Store(sp.s.now().Add(sp.s.cfg.Load().FailTimeout).UnixNano())
		sp.s.log.Debug("continuation refused by a head", "tier", sp.c.tier, "head", h.addr, "error", err)
		return false
	}
	sp.releaseHead()
	sp.head, sp.cur, sp.rd = h, resp.Body, bufio.NewReaderSize(resp.Body, 16<<10)
	sp.spliced, sp.beforeSplit, sp.echo = true, sp.tokens, sp.continuedText()
	fmt.Fprintf(&sp.out, ": slurm-llm: continued on %s %s (%s)\n\n", sp.c.tier, h.addr, oneLine(why))
	sp.s.metrics.continued.WithLabelValues(sp.c.tier, "continued").Inc()
	sp.s.metrics.pause.WithLabelValues(sp.c.tier).Observe(sp.s.now().Sub(sp.cutAt).Seconds())
	return true
}

// continuedText is the text the continuation's assistant message (or
// prompt) ends with: what the client received of the answer (after the
// client's own prefill, when it sent one).
func (sp *splicer) continuedText() string { return sp.content.String() }

// continuation is the request to send again: with the answer so far as
// the assistant's message to continue (chat) or appended to the prompt
// (/completion), and the token limit lowered by what was generated.
func (sp *splicer) continuation() ([]byte, error) {
	body := make(map[string]json.RawMessage, len(sp.body)+2)
	for k, v := range sp.body {
		body[k] = v
	}
	set := func(k string, v any) { body[k], _ = json.Marshal(v) }
	for _, key := range []string{"max_tokens", "max_completion_tokens", "n_predict"} {
		var limit int
		if json.Unmarshal(body[key], &limit) == nil && limit > 0 {
			if limit-sp.tokens <= 0 {
				return nil, errors.New("its token limit is reached")
			}
			set(key, limit-sp.tokens)
		}
	}
	if sp.kind == streamRaw {
		var prompt string
		if err := json.Unmarshal(body["prompt"], &prompt); err != nil {
			return nil, errors.New("its prompt is not a plain string")
		}
		set("prompt", prompt+sp.content.String())
		return json.Marshal(body)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		return nil, errors.New("its messages cannot be read")
	}
	text, reasoning := sp.content.String(), sp.reasoning.String()
	if n := len(msgs); n > 0 && roleOf(msgs[n-1]) == "assistant" {
		// The client's own prefill: the answer went on from it (a head that
		// repeats it sent it first: it is in text already).
		var prefill string
		_ = json.Unmarshal(msgs[n-1]["content"], &prefill)
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

func roleOf(m map[string]json.RawMessage) string {
	var r string
	_ = json.Unmarshal(m["role"], &r)
	return r
}

// fail ends the answer with an error event saying why (an answer cut and
// not continued).
func (sp *splicer) fail(typ, why string) {
	if typ == "continuation" {
		sp.s.metrics.continued.WithLabelValues(sp.c.tier, "refused").Inc()
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the answer was cut: " + why,
		"type": "server_error", "code": http.StatusBadGateway}})
	fmt.Fprintf(&sp.out, "data: %s\n\n", b)
	sp.c.outcome, sp.c.why = OutcomeCut, why
	sp.end = true
}

// Close ends the read: the current body is closed (the head's request
// is cancelled if it is still going) and a continuation's head released.
func (sp *splicer) Close() error {
	sp.closeOnce.Do(func() {
		sp.closeCur()
		sp.releaseHead()
		sp.c.heads = sp.heads
	})
	return nil
}

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

// eventData is the data of an SSE event of one data line; ok is false for
// a comment or anything else, which is passed on as it came.
func eventData(ev []byte) (data []byte, ok bool) {
	line := bytes.TrimRight(ev, "\r\n")
	if bytes.Contains(line, []byte("\n")) {
		return nil, false // several lines: not an event the heads send
	}
	data, ok = bytes.CutPrefix(line, []byte("data:"))
	return bytes.TrimSpace(data), ok
}

// take passes one event on, noting what the client has received; a
// continuation's events are rewritten into the first answer's.
func (sp *splicer) take(ev []byte) {
	data, ok := eventData(ev)
	switch {
	case !ok:
		if !sp.spliced {
			sp.out.Write(ev)
		}
		return
	case string(data) == "[DONE]":
		sp.finished = true
		sp.out.Write(ev)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		sp.out.Write(ev) // not ours to judge
		return
	}
	if _, failed := obj["error"]; failed {
		// The head ended the answer with an error of its own (real
		// llama-server does, in-stream, e.g. when its output parser
		// fails): that is its answer's end, not a cut to continue.
		sp.finished = true
		sp.out.Write(ev)
		return
	}
	if sp.kind == streamRaw {
		sp.takeRaw(ev, obj)
		return
	}
	sp.takeChat(ev, obj)
}

// chatChoice is the part of a chat chunk's choice the splicer reads.
type chatChoice struct {
	Delta struct {
		Role             *string         `json:"role"`
		Content          *string         `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// takeChat handles one chat chunk.
func (sp *splicer) takeChat(ev []byte, obj map[string]json.RawMessage) {
	var choices []chatChoice
	_ = json.Unmarshal(obj["choices"], &choices)
	if !sp.spliced {
		if sp.id == "" {
			_ = json.Unmarshal(obj["id"], &sp.id)
			_ = json.Unmarshal(obj["model"], &sp.model)
			sp.created = obj["created"]
		}
		for _, ch := range choices {
			sp.note(ch.Delta.Content, ch.Delta.ReasoningContent, ch.Delta.ToolCalls, ch.FinishReason != nil)
		}
		sp.out.Write(ev)
		return
	}
	// A continuation's chunk: the first answer's id, created and model; no
	// second role chunk; the echo of the prefill, if any, dropped; usage
	// counted for the whole answer.
	var raw []map[string]json.RawMessage
	_ = json.Unmarshal(obj["choices"], &raw)
	keep := raw[:0]
	for i, ch := range choices {
		delta := map[string]json.RawMessage{}
		_ = json.Unmarshal(raw[i]["delta"], &delta)
		delete(delta, "role")
		if ch.Delta.Content != nil {
			text := *ch.Delta.Content
			if sp.echo != "" {
				text = strings.TrimPrefix(text, sp.echo)
				sp.echo = ""
			}
			if text == "" {
				delete(delta, "content")
			} else {
				delta["content"], _ = json.Marshal(text)
			}
			ch.Delta.Content = &text
		}
		if len(delta) == 0 && ch.FinishReason == nil {
			continue // only the role, or only the echo
		}
		raw[i]["delta"], _ = json.Marshal(delta)
		keep = append(keep, raw[i])
		sp.note(ch.Delta.Content, ch.Delta.ReasoningContent, ch.Delta.ToolCalls, ch.FinishReason != nil)
	}
	if len(choices) > 0 && len(keep) == 0 {
		return
	}
	obj["choices"], _ = json.Marshal(keep)
	sp.restamp(obj)
	if u, ok := obj["usage"]; ok && string(u) != "null" {
		obj["usage"] = sp.usage(u)
	}
	sp.emit(obj)
}

// note records a delta the client receives.
func (sp *splicer) note(content, reasoning *string, toolCalls json.RawMessage, finished bool) {
	if content != nil && *content != "" {
		sp.content.WriteString(*content)
		sp.tokens++
	}
	if reasoning != nil && *reasoning != "" {
		sp.reasoning.WriteString(*reasoning)
		sp.tokens++
	}
	if len(toolCalls) > 0 && string(toolCalls) != "null" {
		sp.toolCall = true
	}
	if finished {
		sp.finished = true
	}
}

// takeRaw handles one /completion event.
func (sp *splicer) takeRaw(ev []byte, obj map[string]json.RawMessage) {
	var content string
	var stop bool
	_ = json.Unmarshal(obj["content"], &content)
	_ = json.Unmarshal(obj["stop"], &stop)
	sp.noteRaw(content, stop)
	if !sp.spliced {
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

func (sp *splicer) noteRaw(content string, stop bool) {
	if content != "" {
		sp.content.WriteString(content)
		sp.tokens++
	}
	if stop {
		sp.finished = true
	}
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
