package kvsave

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
)

// Slot is what the save reads of one slot in llama-server's GET /slots
// (server-context.cpp, server_slot::to_json; FACTS.md Q12).
type Slot struct {
	ID           int  `json:"id"`
	IsProcessing bool `json:"is_processing"`
	// NPromptTokens is the tokens the slot's cache holds (its prompt and
	// what it generated); 0 for a slot that never served.
	NPromptTokens int `json:"n_prompt_tokens"`
	// Prompt is the text of its last task's prompt ("" for a slot that
	// never served).
	Prompt string `json:"prompt"`
}

// Conversation reports whether the slot holds a conversation worth saving:
// an idle slot with tokens in its cache and a prompt to key it by.
func (s Slot) Conversation() bool { return !s.IsProcessing && s.NPromptTokens > 0 && s.Prompt != "" }

// Result is llama-server's answer to a slot save or restore.
type Result struct {
	IDSlot   int    `json:"id_slot"`
	Filename string `json:"filename"`
	// NSaved/NRestored are tokens, NWritten/NRead bytes.
	NSaved    int   `json:"n_saved"`
	NWritten  int64 `json:"n_written"`
	NRestored int   `json:"n_restored"`
	NRead     int64 `json:"n_read"`
	Timings   struct {
		SaveMS    float64 `json:"save_ms"`
		RestoreMS float64 `json:"restore_ms"`
	} `json:"timings"`
}

// StatusError is a head's refusal of a slot action: 501 without
// --slot-save-path, 400 for a file it cannot restore (another -fa or
// context: FACTS.md Q12).
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string { return fmt.Sprintf("answered %d: %s", e.Code, e.Body) }

// maxAnswer bounds what is read of a head's answer.
const maxAnswer = 4 << 20

// Slots reads the head's GET /slots at base ("http://host:port"), with
// the header hdr (nil: none; the front door passes the client's, for a
// head run with --api-key).
func Slots(ctx context.Context, c *http.Client, base string, hdr http.Header) ([]Slot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/slots", nil)
	if err != nil {
		return nil, err
	}
	maps.Copy(req.Header, hdr)
	var out []Slot
	if err := do(c, req, &out); err != nil {
		return nil, fmt.Errorf("read slots: %w", err)
	}
	return out, nil
}

// Action asks the head at base to save or restore (action) slot id to or
// from file, a bare name in its --slot-save-path. A save or restore of a
// busy slot waits until it is idle (the head defers it): ctx bounds it.
func Action(ctx context.Context, c *http.Client, base string, hdr http.Header, action string, id int, file string) (Result, error) {
	body, _ := json.Marshal(map[string]string{"filename": file})
	url := base + "/slots/" + strconv.Itoa(id) + "?action=" + action
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	maps.Copy(req.Header, hdr)
	req.Header.Set("Content-Type", "application/json")
	var res Result
	if err := do(c, req, &res); err != nil {
		return Result{}, fmt.Errorf("%s slot %d: %w", action, id, err)
	}
	return res, nil
}

func do(c *http.Client, req *http.Request, v any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		if len(b) > 200 {
			b = b[:200]
		}
		return &StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	return json.Unmarshal(b, v)
}

// ApplyTemplate is the prompt text the head at base makes of a chat
// request's messages (POST /apply-template), the text its /slots shows as
// the prompt of the slot that served them.
func ApplyTemplate(ctx context.Context, c *http.Client, base string, hdr http.Header, messages json.RawMessage) (string, error) {
	body, _ := json.Marshal(map[string]json.RawMessage{"messages": messages})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/apply-template", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	maps.Copy(req.Header, hdr)
	req.Header.Set("Content-Type", "application/json")
	var out struct {
		Prompt string `json:"prompt"`
	}
	if err := do(c, req, &out); err != nil {
		return "", fmt.Errorf("apply template: %w", err)
	}
	return out.Prompt, nil
}
