package main

import "time"

// format shapes a completion's answer: OpenAI chat, or llama-server's own /completion.
type format interface {
	// first is the event sent before any token, nil for none.
	first(j job) any
	token(j job, i int) any
	// last is the closing event; done says whether `data: [DONE]` follows it.
	last(j job) any
	done() bool
	whole(j job, text string) any
}

// chatFormat is /v1/chat/completions.
type chatFormat struct{}

func (chatFormat) first(j job) any {
	return chatChunk(j, map[string]string{"role": "assistant", "content": ""}, nil)
}

func (chatFormat) token(j job, i int) any {
	return chatChunk(j, map[string]string{"content": tokenText(i)}, nil)
}

func (chatFormat) last(j job) any {
	c := chatChunk(j, map[string]string{}, "length")
	c["usage"] = usage(j)
	return c
}

func (chatFormat) done() bool { return true }

func (chatFormat) whole(j job, text string) any {
	return map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(),
		"model": j.model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "length",
			"message": map[string]string{"role": "assistant", "content": text}}},
		"usage": usage(j),
	}
}

func chatChunk(j job, delta map[string]string, finish any) map[string]any {
	return map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(),
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

func (rawFormat) token(_ job, i int) any {
	return map[string]any{"content": tokenText(i), "stop": false}
}

func (rawFormat) last(j job) any { return rawFormat{}.whole(j, "") }

func (rawFormat) done() bool { return false }

func (rawFormat) whole(j job, text string) any {
	return map[string]any{"content": text, "stop": true, "model": j.model,
		"tokens_predicted": j.n, "tokens_evaluated": j.prompt, "stop_type": "limit"}
}
