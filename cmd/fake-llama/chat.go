package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// chatRequest is the part of an OpenAI chat request the fake reads.
type chatRequest struct {
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Content any `json:"content"`
	} `json:"messages"`
}

// errCut means SIGTERM cut the completion (fact 15).
var errCut = errors.New("completion cut by SIGTERM")

// handleChat serves /v1/chat/completions: take a slot, "process the prompt" on every
// worker, then generate tokens at --fake-token-rate, each a round trip to every worker.
func (s *server) handleChat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "POST only", "invalid_request_error")
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON: %v", err), "invalid_request_error")
		return
	}
	n := s.cfg.tokens
	if req.MaxTokens > 0 && req.MaxTokens < n {
		n = req.MaxTokens
	}
	slot, err := s.slots.acquire(r.Context())
	if err != nil {
		return // the client went away while deferred
	}
	defer s.slots.release(slot)
	prompt := promptTokens(req)
	if err := computeAll(s.workers, prompt); err != nil {
		s.abort(w, err)
	}
	s.slots.addTokens(prompt, 0)
	model := req.Model
	if model == "" {
		model = s.modelNames()[0]
	}
	if req.Stream {
		s.streamChat(w, r, model, prompt, n)
		return
	}
	s.completeChat(w, r, model, prompt, n)
}

// promptTokens approximates the prompt's length in tokens by its words.
func promptTokens(req chatRequest) int {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(fmt.Sprint(m.Content)))
	}
	return max(n, 1)
}

func tokenText(i int) string { return fmt.Sprintf("tok%d ", i) }

// generate produces n tokens, paced by --fake-token-rate, calling emit for each.
// It stops early with errCut on SIGTERM, or the context's error when the client leaves;
// a broken worker never returns: the process aborts (fact 13).
func (s *server) generate(ctx context.Context, w http.ResponseWriter, n int, emit func(i int) error) error {
	var interval time.Duration
	if s.cfg.tokenRate > 0 {
		interval = time.Duration(float64(time.Second) / s.cfg.tokenRate)
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-timer.C:
			timer.Reset(interval)
		case <-s.cut:
			return errCut
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := computeAll(s.workers, 1); err != nil {
			s.abort(w, err)
		}
		s.slots.addTokens(0, 1)
		if err := emit(i); err != nil {
			return err
		}
	}
	return nil
}

// completeChat answers with one JSON body in the OpenAI shape.
func (s *server) completeChat(w http.ResponseWriter, r *http.Request, model string, prompt, n int) {
	var text strings.Builder
	err := s.generate(r.Context(), w, n, func(i int) error {
		text.WriteString(tokenText(i))
		return nil
	})
	if errors.Is(err, errCut) {
		panic(http.ErrAbortHandler) // close the connection without an answer
	}
	if err != nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(),
		"model": model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "length",
			"message": map[string]string{"role": "assistant", "content": text.String()}}},
		"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": n,
			"total_tokens": prompt + n},
	})
}

// abort is the real head's GGML_ABORT when a worker is gone (fact 13): the client gets
// an empty reply, stderr names the cause, and the process dies of SIGABRT (status 134).
func (s *server) abort(w http.ResponseWriter, cause error) {
	s.abortOnce.Do(func() {
		fmt.Fprintf(s.log, "ggml/src/ggml-rpc/ggml-rpc.cpp: Remote RPC server crashed or returned malformed response\n")
		fmt.Fprintf(s.log, "fake-llama: %v\n", cause)
		dropConnection(w)
		dieOfSIGABRT()
	})
	dropConnection(w) // a second request that saw the break before the process died
	select {}
}

// dropConnection closes the client's connection without an HTTP answer.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	if conn, _, err := hj.Hijack(); err == nil {
		conn.Close()
	}
}
