package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Saving and restoring a slot's KV cache, as real llama-server does with
// --slot-save-path (FACTS.md Q12): POST /slots/N?action=save|restore|erase
// with {"filename": F}, F a bare name in the directory; 501 for every
// action without the flag; a save or restore of a busy slot waits until
// it is idle. The fake's file holds what a restore must match (context,
// flash attention) and the slot's cached prompt, padded to
// --fake-kv-bytes-per-token per token; like the real one, no model name.

// kvFileHeader is the first line of the fake's slot file.
type kvFileHeader struct {
	Fake      string `json:"fake_kv"`
	NCtx      int    `json:"n_ctx"`
	FlashAttn string `json:"flash_attn"`
	Tokens    int    `json:"tokens"`
	Prompt    string `json:"prompt"`
}

// defaultKVBytesPerToken is the tiny model's figure (measured, FACTS.md Q12).
const defaultKVBytesPerToken = 784

// handleSlotAction serves POST /slots/N.
func (s *server) handleSlotAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "POST only", "invalid_request_error")
		return
	}
	if s.cfg.slotSavePath == "" {
		writeError(w, http.StatusNotImplemented,
			"This server does not support slots action. Start it with `--slot-save-path`", "not_supported_error")
		return
	}
	id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/slots/"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "Invalid slot ID", "invalid_request_error")
		return
	}
	action := r.URL.Query().Get("action")
	if action == "erase" {
		s.slotErase(w, r, id)
		return
	}
	var body struct {
		Filename string `json:"filename"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil || !validFilename(body.Filename) {
		writeError(w, http.StatusBadRequest, "Invalid filename", "invalid_request_error")
		return
	}
	switch action {
	case "save":
		s.slotSave(w, r, id, body.Filename)
	case "restore":
		s.slotRestore(w, r, id, body.Filename)
	default:
		writeError(w, http.StatusBadRequest, "Invalid action", "invalid_request_error")
	}
}

// validFilename is a bare file name (real fs_validate_filename, roughly).
func validFilename(f string) bool {
	return f != "" && f != "." && f != ".." && !strings.ContainsAny(f, "/\\\x00") && len(f) <= 255
}

func (s *server) slotSave(w http.ResponseWriter, r *http.Request, id int, file string) {
	start := time.Now()
	sl, ok := s.slots.holdIdle(r.Context(), id)
	if !ok {
		writeSlotIDError(w, r)
		return
	}
	id %= len(s.slots.slots)
	defer s.slots.unhold(id)
	head, _ := json.Marshal(kvFileHeader{Fake: "slot", NCtx: slotContext, FlashAttn: s.cfg.flashAttn,
		Tokens: sl.cached, Prompt: sl.prompt})
	data := append(head, '\n')
	if pad := sl.cached*s.cfg.kvBytesPerToken - len(data); pad > 0 {
		data = append(data, make([]byte, pad)...)
	}
	if err := os.WriteFile(filepath.Join(s.cfg.slotSavePath, file), data, 0o644); err != nil {
		writeError(w, http.StatusInternalServerError, "Unable to save slot", "server_error")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id_slot": id, "filename": file, "n_saved": sl.cached,
		"n_written": len(data), "timings": map[string]any{"save_ms": msSince(start)}})
}

func (s *server) slotRestore(w http.ResponseWriter, r *http.Request, id int, file string) {
	start := time.Now()
	if _, ok := s.slots.holdIdle(r.Context(), id); !ok {
		writeSlotIDError(w, r)
		return
	}
	id %= len(s.slots.slots)
	defer s.slots.unhold(id)
	data, err := os.ReadFile(filepath.Join(s.cfg.slotSavePath, file))
	var h kvFileHeader
	if err == nil {
		line, _, _ := bytes.Cut(data, []byte("\n"))
		err = json.Unmarshal(line, &h)
	}
	// A file of another context or flash attention setting: real llama.cpp
	// answers a bare 400 (FACTS.md Q12).
	if err != nil || h.Fake != "slot" || h.NCtx != slotContext || h.FlashAttn != s.cfg.flashAttn || h.Tokens > slotContext {
		s.slots.restored(id, "", 0)
		writeError(w, http.StatusBadRequest, "Unable to restore slot: No available space in KV cache or invalid slot save file",
			"invalid_request_error")
		return
	}
	s.slots.restored(id, h.Prompt, h.Tokens)
	writeJSON(w, http.StatusOK, map[string]any{"id_slot": id, "filename": file, "n_restored": h.Tokens,
		"n_read": len(data), "timings": map[string]any{"restore_ms": msSince(start)}})
}

func (s *server) slotErase(w http.ResponseWriter, r *http.Request, id int) {
	sl, ok := s.slots.holdIdle(r.Context(), id)
	if !ok {
		writeSlotIDError(w, r)
		return
	}
	id %= len(s.slots.slots)
	s.slots.restored(id, "", 0)
	s.slots.unhold(id)
	writeJSON(w, http.StatusOK, map[string]any{"id_slot": id, "n_erased": sl.cached})
}

// writeSlotIDError answers an action on a slot that does not exist (or
// whose client left while it waited).
func writeSlotIDError(w http.ResponseWriter, r *http.Request) {
	if r.Context().Err() == nil {
		writeError(w, http.StatusBadRequest, "Invalid slot ID", "invalid_request_error")
	}
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// handleApplyTemplate serves POST /apply-template: the prompt text a chat
// request's messages make (the fake's template: "role: content" lines),
// the text /slots shows as a chat slot's "prompt".
func (s *server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON: %v", err), "invalid_request_error")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": req.promptText()})
}

// promptText is the text of a request's prompt: a /completion prompt as
// it is (one prompt of strings and token ids as its text: the fake's ids
// as their "tokN " words, FACTS.md Q14), a chat request's messages
// through the fake's template.
func (req completionRequest) promptText() string {
	if parts, ok := req.Prompt.([]any); ok {
		var b strings.Builder
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				b.WriteString(p)
			case float64:
				if int(p) >= idBase {
					b.WriteString(tokenText(int(p) - idBase))
				} else {
					fmt.Fprintf(&b, "<%d> ", int(p))
				}
			}
		}
		return b.String()
	}
	if req.Prompt != nil {
		return fmt.Sprint(req.Prompt)
	}
	var b strings.Builder
	for _, m := range req.Messages {
		fmt.Fprintf(&b, "%s: %v\n", m.Role, m.Content)
	}
	return b.String()
}
