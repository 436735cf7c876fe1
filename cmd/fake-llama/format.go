package main

import "time"

// format shapes a completion's answer: OpenAI chat, or llama-server's own /completion.
type format interface {
	// first is the event sent before any token, nil for none.
	first(j job) any
	token(j job, i int) any
	// last is the closing event; tail, if not nil, follows it (the usage
	// chunk); done says whether `data: [DONE]` follows them.
	last(j job) any
	tail(j job) any
	done() bool
	whole(j job, text string) any
}

// chatFormat is /v1/chat/completions.
type chatFormat struct{}

// The stream as real llama-server sends it (measured 2026-11-24, Q8): a
// role chunk with content null, a chunk per token (the first one led by
// the prefill an implicit continuation repeats), a chunk with an empty
// delta and the finish reason, a usage chunk with no choices when
// stream_options.include_usage asks for it, then [DONE].
func (chatFormat) first(j job) any {
	return chatChunk(j, map[string]any{"role": "assistant", "content": nil}, nil)
}

func (chatFormat) token(j job, i int) any {
	text := tokenText(j.first + i)
	if i == 0 {
		text = j.echo + text
	}
	return chatChunk(j, map[string]any{"content": text}, nil)
}

func (chatFormat) last(j job) any { return chatChunk(j, map[string]any{}, "length") }

func (chatFormat) tail(j job) any {
	if !j.usage {
		return nil
	}
	c := chatChunk(j, nil, nil)
	c["choices"], c["usage"] = []any{}, usage(j)
	return c
}

func (chatFormat) done() bool { return true }

func (chatFormat) whole(j job, text string) any {
	return map[string]any{
		"id": j.id, "object": "chat.completion", "created": time.Now().Unix(),
		"model": j.model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "length",
			"message": map[string]string{"role": "assistant", "content": j.echo + text}}},
		"usage": usage(j),
	}
}

func chatChunk(j job, delta map[string]any, finish any) map[string]any {
	return map[string]any{
		"id": j.id, "object": "chat.completion.chunk", "created": time.Now().Unix(),
		"model":   j.model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}},
	}
}

func usage(j job) map[string]int {
	return map[string]int{"prompt_tokens": j.prompt, "completion_tokens": j.n,
		"total_tokens": j.prompt + j.n}
}

// rawFormat is llama-server's /completion: `content` and `stop`, no [DONE] when streamed.
type rawFormat struct{}

func (rawFormat) first(job) any { return nil }

// token is one event: its text, its token's id and the count so far, as
// real sends them (FACTS.md Q14).
func (rawFormat) token(j job, i int) any {
	return map[string]any{"index": 0, "content": tokenText(j.first + i), "tokens": []int{tokenID(j.first + i)},
		"stop": false, "id_slot": -1, "tokens_predicted": i + 1, "tokens_evaluated": j.prompt}
}

func (rawFormat) last(j job) any { return rawFormat{}.whole(j, "") }

func (rawFormat) tail(job) any { return nil }

func (rawFormat) done() bool { return false }

func (rawFormat) whole(j job, text string) any {
	return map[string]any{"content": text, "stop": true, "model": j.model,
		"tokens_predicted": j.n, "tokens_evaluated": j.prompt, "stop_type": "limit",
		"timings": map[string]any{"prompt_n": j.evaluated, "predicted_n": j.n}}
}
