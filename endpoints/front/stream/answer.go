package stream

import (
	"bytes"
	"encoding/json"
	"strings"

	"slurm-llm/endpoints/front/wire"
)

// Answer is a streamed answer as its client receives it, from the first
// head and then from each continuation's: the events are passed on as they
// came from the first head (its bytes unchanged) and a continuation's are
// rewritten into the first answer's (Splice); what they say of the answer's
// tokens and finish goes into its wire.Tally. The zero value reads nothing:
// NewAnswer makes one.
type Answer struct {
	kind  Kind
	tally *wire.Tally
	// usageAsked: the front door asked the head for the usage chunk on its
	// own, and the client does not get a chunk of usage alone.
	usageAsked bool
	data       []byte // a multi-line event's data, joined (reused)
	seen       int    // tokens of the event being taken

	// What the client has received.
	taken     int // events taken (any head)
	id, model string
	created   json.RawMessage
	content   []byte
	reasoning []byte
	tokens    int
	finished  bool // a finish reason (chat) or "stop": true (/completion)
	toolCall  bool
	// A continuation's: its events are rewritten (spliced); the tokens the
	// client had when it began; the text its first delta may repeat.
	spliced     bool
	beforeSplit int
	echo        string
	// ids: a /completion's token ids (rawids.go), followed once KeepIDs
	// said the answer may be continued.
	ids     rawIDs
	keepIDs bool
}

// NewAnswer reads a stream of kind whose tally is t; usageAsked is set
// when the front door asked the head for its usage chunk and the client
// did not (that chunk is then not passed on).
func NewAnswer(kind Kind, t *wire.Tally, usageAsked bool) Answer {
	return Answer{kind: kind, tally: t, usageAsked: usageAsked}
}

// Taken is how many events were taken (a stream is never moved to another
// head before its first).
func (a *Answer) Taken() int { return a.taken }

// Tokens is how many tokens the client received, counted by their chunks
// (a chunk may carry more than one: Text is what to tokenize).
func (a *Answer) Tokens() int { return a.tokens }

// Finished reports whether the answer ended as its head ends one: a finish
// reason, [DONE], "stop": true, or the head's own error.
func (a *Answer) Finished() bool { return a.finished }

// ToolCall reports whether the answer has begun a tool call (never
// continued inside one).
func (a *Answer) ToolCall() bool { return a.toolCall }

// Text is the text the client received: the reasoning, then the content.
func (a *Answer) Text() string { return string(a.reasoning) + string(a.content) }

// Splice starts a continuation: the events taken from now on are its
// head's, rewritten into the first answer's.
func (a *Answer) Splice() {
	a.spliced, a.beforeSplit, a.echo = true, a.sentTokens(), string(a.content)
	a.ids.switched()
}

// KeepIDs has a /completion's token ids followed, for its continuation;
// an answer that will not be continued is spared the work.
func (a *Answer) KeepIDs() { a.keepIDs = true }

// ContinuedFrom is the text the client had when the current continuation
// began ("" before any): that head's prompt went on with it.
func (a *Answer) ContinuedFrom() string { return a.echo }

// IDsKnown reports the number of tokens the client received when a
// /completion's events named each of them (FACTS.md Q14): exactly, with
// no tokenizing; ok is false when they did not.
func (a *Answer) IDsKnown() (n int, ok bool) {
	if !a.kind.IsRaw() || !a.ids.exact() {
		return 0, false
	}
	return len(a.ids.sent), true
}

// sentTokens is how many tokens the client has: its token ids when known,
// else the events that brought text.
func (a *Answer) sentTokens() int {
	if n, ok := a.IDsKnown(); ok {
		return n
	}
	return a.tokens
}

// Take passes one event on to out, noting what the client has received;
// a continuation's events are rewritten into the first answer's. It
// returns how many tokens reached the client with the event (their
// timing is the caller's).
func (a *Answer) Take(ev []byte, out *bytes.Buffer) (tokens int) {
	a.taken, a.seen = a.taken+1, 0
	a.take(ev, out)
	return a.seen
}

// take is Take's reading of one event.
func (a *Answer) take(ev []byte, out *bytes.Buffer) {
	var e event
	e, a.data = parseEvent(ev, a.data)
	switch {
	case e.failed:
		// The head ended the answer with an error of its own: its
		// answer's end, not a cut to continue.
		a.finished, a.tally.Finish = true, wire.FinishError
		out.Write(ev)
		return
	case e.data == nil:
		out.Write(ev) // a comment, or a field an Answer does not read
		return
	case string(e.data) == "[DONE]":
		a.finished = true
		out.Write(ev)
		return
	}
	if a.kind.IsRaw() {
		a.takeRaw(out, ev, e.data)
		return
	}
	a.takeChat(out, ev, e.data)
}

// takeChat handles one chat chunk: passed on as it came from the first
// head; a continuation's rewritten into the first answer's.
func (a *Answer) takeChat(out *bytes.Buffer, ev, data []byte) {
	if !a.spliced {
		ci, ok := scanChat(data)
		if ok && ci.failed {
			a.finished, a.tally.Finish = true, wire.FinishError // the head's own error: its answer's end
		}
		if ok && !ci.failed {
			if a.id == "" {
				a.id, _ = wire.StringValue(ci.id)
				a.model, _ = wire.StringValue(ci.model)
				a.created = bytes.Clone(ci.created)
			}
			a.note(ci.content, ci.reasoning, ci.toolCall, ci.finish)
			a.noteFinish(ci.finishReason)
			if ci.usage != nil && !a.takeUsage(ci.usage, ci.usageOnly) {
				return
			}
		}
		out.Write(ev)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		out.Write(ev) // not ours to judge
		return
	}
	if _, failed := obj["error"]; failed {
		a.finished, a.tally.Finish = true, wire.FinishError
		out.Write(ev)
		return
	}
	a.spliceChat(out, obj)
}

// takeUsage records an answer's usage; it reports whether the chunk that
// holds it goes to the client: not a chunk of usage alone (no choices)
// that the front door asked for and the client did not.
func (a *Answer) takeUsage(raw []byte, alone bool) bool {
	a.tally.TakeUsage(raw)
	return !alone || !a.usageAsked
}

// noteFinish records a chunk's finish reason.
func (a *Answer) noteFinish(raw []byte) {
	if r, ok := wire.StringValue(raw); ok && r != "" {
		a.tally.Finish = r
	}
}

// spliceChat rewrites a continuation's chunk into the first answer's: its
// id, created and model; no second role chunk; the echo of the prefill, if
// any, dropped; usage counted for the whole answer.
func (a *Answer) spliceChat(out *bytes.Buffer, obj map[string]json.RawMessage) {
	var raw []map[string]json.RawMessage
	_ = json.Unmarshal(obj["choices"], &raw)
	keep := raw[:0]
	for _, ch := range raw {
		delta := map[string]json.RawMessage{}
		_ = json.Unmarshal(ch["delta"], &delta)
		delete(delta, "role")
		if c, ok := delta["content"]; ok && !wire.IsNull(c) {
			text, _ := wire.StringValue(c)
			if a.echo != "" {
				text = strings.TrimPrefix(text, a.echo)
				a.echo = ""
			}
			if text == "" {
				delete(delta, "content")
			} else {
				delta["content"], _ = json.Marshal(text)
			}
		}
		finish := !wire.IsNull(ch["finish_reason"])
		if finish {
			a.noteFinish(ch["finish_reason"])
		}
		if len(delta) == 0 && !finish {
			continue // only the role, or only the echo
		}
		ch["delta"], _ = json.Marshal(delta)
		keep = append(keep, ch)
		tc := delta["tool_calls"]
		a.note(delta["content"], delta["reasoning_content"], !wire.IsNull(tc) && string(tc) != "[]", finish)
	}
	if len(raw) > 0 && len(keep) == 0 {
		return
	}
	obj["choices"], _ = json.Marshal(keep)
	a.restamp(obj)
	if u, ok := obj["usage"]; ok && !wire.IsNull(u) {
		obj["usage"] = a.usage(u)
		if !a.takeUsage(obj["usage"], len(raw) == 0) {
			return
		}
	}
	a.emit(out, obj)
}

// note records a delta the client receives (raw JSON strings).
func (a *Answer) note(content, reasoning []byte, toolCall, finished bool) {
	text := wire.AppendText(&a.content, content)
	if wire.AppendText(&a.reasoning, reasoning) || text {
		a.tokens++
		a.seen++
	}
	a.toolCall = a.toolCall || toolCall
	a.finished = a.finished || finished
}

// takeRaw handles one /completion event; its last one (stop) carries
// the answer's tokens and why it stopped.
func (a *Answer) takeRaw(out *bytes.Buffer, ev, data []byte) {
	var content, failed, predicted, evaluated, stopType, ids []byte
	var stop bool
	err := wire.EachKey(data, func(key, val []byte, _ int) bool {
		switch {
		case wire.KeyIs(key, "content"):
			content = val
		case wire.KeyIs(key, "tokens"):
			ids = val
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
			a.finished, a.tally.Finish = true, wire.FinishError
		}
		out.Write(ev)
		return
	}
	if wire.AppendText(&a.content, content) {
		a.tokens++
		a.seen++
	}
	if !stop && a.keepIDs {
		a.ids.note(ids, predicted, content)
	}
	if stop {
		a.finished = true
		a.tally.Finish = rawFinish(stopType)
		p, _ := wire.NumberValue(evaluated)
		n, _ := wire.NumberValue(predicted)
		if a.spliced {
			p, n = max(p-float64(a.beforeSplit), 0), n+float64(a.beforeSplit)
		}
		a.tally.Prompt, a.tally.Completion, a.tally.Counted = int(p), int(n), predicted != nil
	}
	if !a.spliced {
		out.Write(ev)
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		out.Write(ev)
		return
	}
	for key, add := range map[string]int{"tokens_predicted": a.beforeSplit, "tokens_evaluated": -a.beforeSplit} {
		var n int
		if json.Unmarshal(obj[key], &n) == nil && obj[key] != nil {
			obj[key], _ = json.Marshal(max(n+add, 0))
		}
	}
	if a.model != "" {
		obj["model"], _ = json.Marshal(a.model)
	}
	a.emit(out, obj)
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
func (a *Answer) restamp(obj map[string]json.RawMessage) {
	if a.id != "" {
		obj["id"], _ = json.Marshal(a.id)
	}
	if a.model != "" {
		obj["model"], _ = json.Marshal(a.model)
	}
	if a.created != nil {
		obj["created"] = a.created
	}
}

// usage is a continuation's usage as the client's request's: the tokens
// generated before the split count as completion, not as prompt (the
// continuation's prompt held them as its prefill; re-tokenized, so the
// split is approximate by the tokenizer's view of that text).
func (a *Answer) usage(raw json.RawMessage) json.RawMessage {
	var u map[string]json.RawMessage
	if json.Unmarshal(raw, &u) != nil {
		return raw
	}
	var prompt, completion int
	_ = json.Unmarshal(u["prompt_tokens"], &prompt)
	_ = json.Unmarshal(u["completion_tokens"], &completion)
	prompt, completion = max(prompt-a.beforeSplit, 0), completion+a.beforeSplit
	u["prompt_tokens"], _ = json.Marshal(prompt)
	u["completion_tokens"], _ = json.Marshal(completion)
	u["total_tokens"], _ = json.Marshal(prompt + completion)
	out, _ := json.Marshal(u)
	return out
}

// emit writes a rewritten event.
func (a *Answer) emit(out *bytes.Buffer, obj map[string]json.RawMessage) {
	b, err := json.Marshal(obj)
	if err != nil {
		return
	}
	out.WriteString("data: ")
	out.Write(b)
	out.WriteString("\n\n")
}
