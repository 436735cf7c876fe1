package stream

import (
	"encoding/json"
	"errors"
	"strings"
)

// Continuation is the request (its body, the client's request's) to send
// again: with the answer so far as the assistant's message to continue
// (chat) or appended to the prompt (/completion: its token ids when its
// events named them all, rawids.go; else its text), and the token limit
// lowered by what was generated (generated, asked only when the request
// has a limit: the caller's count of the tokens the client received);
// pinned to slot (id_slot) when the head restored the conversation's
// saved slot there (-1: none). The error says why it cannot be sent.
//
// The continuation says what it is explicitly (continue_final_message,
// add_generation_prompt false), which llama-server takes with or without
// --no-prefill-assistant and answers with the new tokens only (llama.cpp,
// measured 2026-11-24, the fake's FACTS.md Q8; an implicit prefill
// repeats the prefill in its first delta: such an echo is stripped all the
// same). Sampling starts afresh: a continuation is a valid one, not the
// same bytes (but a greedy /completion continued by its ids on a head that
// restored its slot goes on byte for byte).
func (a *Answer) Continuation(request []byte, slot int, generated func() int) ([]byte, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(request, &body); err != nil {
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
				used = generated()
			}
			if limit-used <= 0 {
				return nil, errors.New("its token limit is reached")
			}
			set(key, limit-used)
		}
	}
	if a.kind.IsRaw() && a.ids.exact() {
		prompt, ok := a.ids.prompt(body["prompt"])
		if !ok {
			return nil, errors.New("its prompt is neither a string nor one prompt of token ids")
		}
		body["prompt"] = prompt
		return json.Marshal(body)
	}
	if a.kind.IsRaw() {
		var prompt string
		if err := json.Unmarshal(body["prompt"], &prompt); err != nil {
			return nil, errors.New("its prompt is not a plain string")
		}
		set("prompt", prompt+string(a.content))
		return json.Marshal(body)
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		return nil, errors.New("its messages cannot be read")
	}
	text, reasoning := string(a.content), string(a.reasoning)
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

// Prompt is what the head was asked to answer in a request's body, by its
// kind: a /completion's prompt (a plain string), or the chat messages
// without the client's own trailing assistant message (its prefill, which
// the answer goes on from).
func Prompt(kind Kind, request []byte) (prompt string, messages json.RawMessage, err error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(request, &body); err != nil {
		return "", nil, err
	}
	if kind.IsRaw() {
		if err := json.Unmarshal(body["prompt"], &prompt); err != nil {
			return "", nil, errors.New("the prompt is not a plain string")
		}
		return prompt, nil, nil
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(body["messages"], &msgs); err != nil {
		return "", nil, errors.New("the messages cannot be read")
	}
	if n := len(msgs); n > 0 && roleOf(msgs[n-1]) == "assistant" {
		msgs = msgs[:n-1]
	}
	messages, _ = json.Marshal(msgs)
	return "", messages, nil
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

// roleOf is a message's role.
func roleOf(m map[string]json.RawMessage) string {
	var r string
	_ = json.Unmarshal(m["role"], &r)
	return r
}
