// Package fronttest reads the front door's streamed answers for end-to-end
// tests and benchmarks: the fake llama.cpp numbers its tokens (tok0, tok1,
// …) and a continuation goes on counting from its prefill, so one
// unbroken answer is tok0…tok(n-1) in order. It is for tests only.
package fronttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// A streamed answer as the client of the front door saw it: its tokens in
// order (the fake numbers them: "tok0 ", "tok1 ", …, and a continuation
// goes on counting from its prefill, so a gap or a repeat shows), its ids,
// role chunks, finishes, whether it ended with [DONE], the continuation
// comments, an error event, and the longest pause between two tokens.
type Seen struct {
	Tokens   []string
	IDs      map[string]bool
	Roles    int
	Finishes int
	Done     bool
	Comments int
	ErrEvent string
	Pause    time.Duration
	Err      error
}

// StreamChat posts one streamed chat request for model to the front door
// and reads it to its end; progress, if set, gets the token count as it
// grows.
func StreamChat(base, model string, maxTokens int, progress func(int)) Seen {
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(ChatBody(model, maxTokens)))
	if err != nil {
		return Seen{IDs: map[string]bool{}, Err: err}
	}
	defer resp.Body.Close()
	return ReadSSE(resp.Body, progress)
}

// ChatBody is the streamed chat request the readers here send: the fake
// answers it with tok0 … tok(maxTokens-1).
func ChatBody(model string, maxTokens int) string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"count"}]}`, model, maxTokens)
}

// ReadSSE reads a streamed chat answer (server-sent events) to its end;
// progress, if set, gets the token count as it grows.
func ReadSSE(r io.Reader, progress func(int)) Seen {
	s := Seen{IDs: map[string]bool{}}
	sc := bufio.NewScanner(r)
	last := time.Now()
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			s.Comments++
		case line == "data: [DONE]":
			s.Done = true
		case strings.HasPrefix(line, "data: "):
			if err := s.event(line[6:], &last, progress); err != nil {
				s.Err = err
				return s
			}
		}
	}
	s.Err = sc.Err()
	return s
}

// event folds one event (a chunk of the answer, or an error) into s; last
// is when the previous token came.
func (s *Seen) event(data string, last *time.Time, progress func(int)) error {
	var ev struct {
		ID      string                    `json:"id"`
		Error   *struct{ Message string } `json:"error"`
		Choices []struct {
			Delta struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return fmt.Errorf("event %q: %w", data, err)
	}
	if ev.Error != nil {
		s.ErrEvent = ev.Error.Message
	}
	if ev.ID != "" {
		s.IDs[ev.ID] = true
	}
	for _, ch := range ev.Choices {
		if ch.Delta.Role != nil {
			s.Roles++
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			s.Pause = max(s.Pause, time.Since(*last))
			*last = time.Now()
			s.Tokens = append(s.Tokens, strings.Fields(*ch.Delta.Content)...)
			if progress != nil {
				progress(len(s.Tokens))
			}
		}
		if ch.FinishReason != nil {
			s.Finishes++
		}
	}
	return nil
}

// Whole reports whether s is one unbroken answer of n tokens: tok0…tok(n-1)
// in order, one id, one role chunk, one finish, [DONE], no error.
func (s Seen) Whole(n int) error {
	if s.Err != nil || s.ErrEvent != "" {
		return fmt.Errorf("stream error %v, error event %q", s.Err, s.ErrEvent)
	}
	for i, tok := range s.Tokens {
		if tok != fmt.Sprintf("tok%d", i) {
			return fmt.Errorf("token %d is %q (a gap or a repeat): %v", i, tok, s.Tokens)
		}
	}
	if len(s.Tokens) != n || len(s.IDs) != 1 || s.Roles != 1 || s.Finishes != 1 || !s.Done {
		return fmt.Errorf("%d tokens (want %d), ids %v, %d role chunks, %d finishes, [DONE] %v",
			len(s.Tokens), n, s.IDs, s.Roles, s.Finishes, s.Done)
	}
	return nil
}
