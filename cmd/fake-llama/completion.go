package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// completionRequest is the part of an OpenAI chat request, or of llama-server's own
// /completion request, that the fake reads.
type completionRequest struct {
	Model     string `json:"model"`
	Stream    bool   `json:"stream"`
	MaxTokens int    `json:"max_tokens"`
	NPredict  int    `json:"n_predict"`
	Prompt    any    `json:"prompt"`
	Messages  []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// ContinueFinalMessage and AddGenerationPrompt: continuing the last
	// (assistant) message explicitly (measured 2026-11-24, Q8).
	ContinueFinalMessage any   `json:"continue_final_message"`
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
	// IDSlot pins the request to a slot (real's id_slot; -1 or absent: any).
	IDSlot *int `json:"id_slot"`
}

// job is one accepted completion: what to generate and how to shape the answer.
type job struct {
	format format
	model  string
	id     string // the answer's id: chatcmpl- and 32 random letters, new per request (Q8)
	prompt int    // prompt tokens
	// evaluated is how many of them were evaluated (timings.prompt_n):
	// fewer when the slot's cache held the prompt's beginning.
	evaluated int
	// first is the index of the first token generated: a continued answer
	// goes on counting from its prefill (the fake's own: tokens are
	// numbered, so tests see where a continuation joins); echo is the
	// prefill an implicit continuation repeats before its first token
	// (measured 2026-11-24, Q8).
	first int
	echo  string
	usage bool // stream_options.include_usage
	n     int  // tokens to generate
	slots *slotTable
	slot  int // the slot in slots
}

// errCut means SIGTERM cut the completion (fact 15).
var errCut = errors.New("completion cut by SIGTERM")

func (s *server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.serveCompletion(w, r, chatFormat{})
}

func (s *server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.serveCompletion(w, r, rawFormat{})
}

// serveCompletion takes a slot, "processes the prompt" on every worker, then generates
// tokens at --fake-token-rate, each a round trip to every worker.
func (s *server) serveCompletion(w http.ResponseWriter, r *http.Request, f format) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "POST only", "invalid_request_error")
		return
	}
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON: %v", err), "invalid_request_error")
		return
	}
	if msg := req.refusal(); msg != "" { // real server-common.cpp, measured 2026-11-24 (Q8)
		writeError(w, http.StatusBadRequest, msg, "invalid_request_error")
		return
	}
	slots := s.slots
	if s.router != nil { // real proxy_post: the body names the model
		var err error
		if slots, err = s.router.use(r.Context(), req.Model); err != nil {
			writeRouteError(w, err)
			return
		}
	}
	slot, err := slots.acquirePinned(r.Context(), req.IDSlot)
	if err != nil {
		return // the client went away while deferred
	}
	defer slots.release(slot)
	j := s.newJob(req, f)
	j.slots, j.slot = slots, slot
	if err := computeAll(s.workers, j.prompt); err != nil {
		s.abort(w, err)
	}
	j.evaluated = j.slots.prompted(j.slot, j.prompt, j.n, req.promptText())
	if req.Stream {
		s.streamCompletion(w, r, j)
		return
	}
	s.completeWhole(w, r, j)
}

func (s *server) newJob(req completionRequest, f format) job {
	// a single-model head does not check the request's "model": every reply
	// names the served model (Q4); a router serves the model named
	j := job{format: f, model: req.Model, n: s.cfg.tokens, id: "chatcmpl-" + randomLetters(32), usage: req.StreamOptions.IncludeUsage}
	if s.router == nil {
		j.model, _ = s.modelName()
	}
	j.first, j.echo = req.continuation()
	for _, limit := range []int{req.MaxTokens, req.NPredict} {
		if limit > 0 && limit < j.n {
			j.n = limit
		}
	}
	words := 0
	if req.Prompt != nil { // a chat request has none: not a word "<nil>"
		words = len(strings.Fields(req.promptText()))
	}
	for _, m := range req.Messages {
		words += len(strings.Fields(fmt.Sprint(m.Content)))
	}
	j.prompt = max(words, 1) // a rough count: one token per word
	return j
}

func tokenText(i int) string { return fmt.Sprintf("tok%d ", i) }

// tokenID is the id of the fake's token "tokI " (a /completion event's
// "tokens", a prompt's ids).
func tokenID(i int) int { return idBase + i }

// idBase is the fake's id of "tok0 ".
const idBase = 1_000_000

// refusal is real llama-server's 400 for a continuation it cannot make
// (measured 2026-11-24, Q8), or "".
func (req completionRequest) refusal() string {
	n := len(req.Messages)
	switch {
	case n >= 2 && req.Messages[n-1].Role == "assistant" && req.Messages[n-2].Role == "assistant":
		return "Cannot have 2 or more assistant messages at the end of the list."
	case continuationAsked(req.ContinueFinalMessage) && (req.AddGenerationPrompt == nil || *req.AddGenerationPrompt):
		return "Cannot set both add_generation_prompt and continue_final_message to true."
	}
	return ""
}

// continuationAsked reports whether continue_final_message asks for one:
// true, "content" or "reasoning_content" (common_chat_continuation_parse).
func continuationAsked(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "content" || v == "reasoning_content"
	}
	return false
}

// continuation is where a request's answer starts: a chat request whose
// last message is the assistant's continues it (the server's default
// prefill, or continue_final_message), its tokens numbered on from the
// prefill's words; an implicit one repeats the prefill in its first delta
// (Q8). A /completion prompt that ends in the fake's own tokens goes on
// counting them.
func (req completionRequest) continuation() (first int, echo string) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "assistant" {
		prefill := fmt.Sprint(req.Messages[n-1].Content)
		if req.Messages[n-1].Content == nil {
			prefill = ""
		}
		if !continuationAsked(req.ContinueFinalMessage) {
			echo = prefill
		}
		return len(strings.Fields(prefill)), echo
	}
	if req.Prompt != nil {
		for _, w := range strings.Fields(req.promptText()) {
			if _, err := fmt.Sscanf(w, "tok%d", new(int)); err == nil {
				first++
			}
		}
	}
	return first, ""
}

// generate produces j.n tokens, paced by --fake-token-rate, calling emit for each.
// It stops early with errCut on SIGTERM, or the context's error when the client leaves;
// a broken worker never returns: the process aborts (fact 13).
func (s *server) generate(ctx context.Context, w http.ResponseWriter, j job, emit func(i int) error) error {
	var interval time.Duration
	if s.cfg.tokenRate > 0 {
		interval = time.Duration(float64(time.Second) / s.cfg.tokenRate)
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for i := 0; i < j.n; i++ {
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
		j.slots.decoded(j.slot)
		if err := emit(i); err != nil {
			return err
		}
	}
	return nil
}

// completeWhole answers with one JSON body.
func (s *server) completeWhole(w http.ResponseWriter, r *http.Request, j job) {
	var text strings.Builder
	err := s.generate(r.Context(), w, j, func(i int) error {
		text.WriteString(tokenText(j.first + i))
		return nil
	})
	if errors.Is(err, errCut) {
		panic(http.ErrAbortHandler) // close the connection without an answer
	}
	if err != nil {
		return
	}
	writeJSON(w, http.StatusOK, j.format.whole(j, text.String()))
}

// abort is the real head's GGML_ABORT on a failed round trip to a worker (fact
// 13, Q1): the client of the request that found it (w, nil for none) gets an
// empty reply, stderr says what real says, and the process dies of SIGABRT
// (status 134).
func (s *server) abort(w http.ResponseWriter, cause error) {
	s.abortOnce.Do(func() {
		var re *rpcError
		if errors.As(cause, &re) {
			re.abortLines(s.log)
		} else {
			fmt.Fprintf(s.log, "ggml/src/ggml-rpc/ggml-rpc.cpp: Remote RPC server crashed or returned malformed response\n")
		}
		s.log.fake("%v\n", cause)
		dropConnection(w)
		dieOfSIGABRT()
	})
	dropConnection(w) // a second request that saw the break before the process died
	select {}
}

// dropConnection closes the client's connection without an HTTP answer.
func dropConnection(w http.ResponseWriter) {
	if w == nil {
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	if conn, _, err := hj.Hijack(); err == nil {
		conn.Close()
	}
}

// randomLetters is n random ASCII letters (real's ids, Q8).
func randomLetters(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.IntN(len(letters))]
	}
	return string(b)
}
