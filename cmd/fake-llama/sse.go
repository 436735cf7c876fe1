package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// sseWriter writes server-sent events, one flushed `data: ...` event per call.
type sseWriter struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sseWriter{w: w, fl: fl}
}

func (e *sseWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return e.sendRaw(string(b))
}

func (e *sseWriter) sendRaw(data string) error {
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", data); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if e.fl != nil {
		e.fl.Flush()
	}
	return nil
}

// chunk is one chat.completion.chunk with the given delta and finish reason.
func chunk(model string, delta map[string]string, finish any) map[string]any {
	return map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(),
		"model":   model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}},
	}
}

// streamChat streams one chunk per token and ends with `data: [DONE]`. A SIGTERM cut
// closes the connection with no [DONE] (fact 15).
func (s *server) streamChat(w http.ResponseWriter, r *http.Request, model string, prompt, n int) {
	s.slots.addStream(1)
	defer s.slots.addStream(-1)
	ev := newSSEWriter(w)
	if err := ev.send(chunk(model, map[string]string{"role": "assistant", "content": ""}, nil)); err != nil {
		return
	}
	err := s.generate(r.Context(), w, n, func(i int) error {
		return ev.send(chunk(model, map[string]string{"content": tokenText(i)}, nil))
	})
	if errors.Is(err, errCut) {
		panic(http.ErrAbortHandler) // cut: no terminating chunk, no [DONE]
	}
	if err != nil {
		return
	}
	final := chunk(model, map[string]string{}, "length")
	final["usage"] = map[string]int{"prompt_tokens": prompt, "completion_tokens": n,
		"total_tokens": prompt + n}
	if ev.send(final) == nil {
		_ = ev.sendRaw("[DONE]")
	}
}
