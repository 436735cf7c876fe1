package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// streamCompletion streams one event per token and a closing event (then `data: [DONE]`
// for chat). A SIGTERM cut closes the connection with neither (fact 15).
func (s *server) streamCompletion(w http.ResponseWriter, r *http.Request, j job) {
	j.slots.addStream(1)
	defer j.slots.addStream(-1)
	ev := newSSEWriter(w)
	if first := j.format.first(j); first != nil {
		if err := ev.send(first); err != nil {
			return
		}
	}
	err := s.generate(r.Context(), w, j, func(i int) error {
		return ev.send(j.format.token(j, i))
	})
	if errors.Is(err, errCut) {
		panic(http.ErrAbortHandler) // cut: no terminating chunk, no [DONE]
	}
	if err != nil {
		return
	}
	if ev.send(j.format.last(j)) != nil {
		return
	}
	if t := j.format.tail(j); t != nil && ev.send(t) != nil {
		return
	}
	if j.format.done() {
		_ = ev.sendRaw("[DONE]")
	}
}
