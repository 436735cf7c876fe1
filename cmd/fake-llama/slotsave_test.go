package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// post sends body to url and returns the status and the answer.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("post %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without --slot-save-path every slot action is 501 (FACTS.md Q12).
func TestSlotActionsNeedSlotSavePath(t *testing.T) {
	_, base := startHead(t, "--fake-token-rate", "0")
	waitReady(t, base)
	for _, action := range []string{"save", "restore", "erase"} {
		if code, body := post(t, base+"/slots/0?action="+action, `{"filename":"f"}`); code != http.StatusNotImplemented {
			t.Errorf("%s: %d %s, want 501", action, code, body)
		}
	}
}

// A slot saved on one head and restored on another (same context and -fa)
// lets a request that goes on from its prompt evaluate only the new
// tokens; a head with another -fa refuses the file with a 400; a slot
// shows its last prompt while idle.
func TestSlotSaveRestore(t *testing.T) {
	dir := t.TempDir()
	_, a := startHead(t, "--fake-tokens", "3", "--fake-token-rate", "0", "--slot-save-path", dir, "-np", "2")
	_, b := startHead(t, "--fake-tokens", "3", "--fake-token-rate", "0", "--slot-save-path", dir, "-np", "2")
	_, c := startHead(t, "--fake-tokens", "3", "--fake-token-rate", "0", "--slot-save-path", dir, "-fa", "off")
	for _, base := range []string{a, b, c} {
		waitReady(t, base)
	}
	prompt := "one two three four five six"
	if code, body := post(t, a+"/completion", `{"prompt":"`+prompt+`","id_slot":1}`); code != http.StatusOK {
		t.Fatalf("completion: %d %s", code, body)
	}
	_, body := get(t, a+"/slots")
	var slots []struct {
		ID     int    `json:"id"`
		Busy   bool   `json:"is_processing"`
		Tokens int    `json:"n_prompt_tokens"`
		Prompt string `json:"prompt"`
	}
	decodeJSON(t, body, &slots)
	if len(slots) != 2 || slots[1].Busy || slots[1].Tokens != 9 || slots[1].Prompt != prompt {
		t.Fatalf("slots %s: want slot 1 idle, holding 9 tokens and its prompt", body)
	}
	code, body := post(t, a+"/slots/1?action=save", `{"filename":"conv.slot"}`)
	var saved struct {
		NSaved   int `json:"n_saved"`
		NWritten int `json:"n_written"`
	}
	decodeJSON(t, body, &saved)
	st, err := os.Stat(filepath.Join(dir, "conv.slot"))
	if code != http.StatusOK || err != nil || saved.NSaved != 9 || int64(saved.NWritten) != st.Size() || st.Size() != 9*defaultKVBytesPerToken {
		t.Fatalf("save: %d %s (file %v %v)", code, body, st, err)
	}
	if code, body := post(t, a+"/slots/0?action=save", `{"filename":"../x"}`); code != http.StatusBadRequest {
		t.Errorf("save to a path: %d %s, want 400", code, body)
	}
	if code, body := post(t, c+"/slots/0?action=restore", `{"filename":"conv.slot"}`); code != http.StatusBadRequest {
		t.Errorf("restore on a head with another -fa: %d %s, want 400", code, body)
	}
	code, body = post(t, b+"/slots/0?action=restore", `{"filename":"conv.slot"}`)
	var restored struct {
		NRestored int `json:"n_restored"`
	}
	decodeJSON(t, body, &restored)
	if code != http.StatusOK || restored.NRestored != 9 {
		t.Fatalf("restore: %d %s", code, body)
	}
	code, body = post(t, b+"/completion", `{"prompt":"`+prompt+` tok0 tok1 tok2 ","id_slot":0}`)
	var done struct {
		Timings struct {
			PromptN int `json:"prompt_n"`
		} `json:"timings"`
		Evaluated int `json:"tokens_evaluated"`
	}
	if err := json.Unmarshal([]byte(body), &done); err != nil || code != http.StatusOK {
		t.Fatalf("completion after restore: %d %s", code, body)
	}
	if done.Evaluated != 9 || done.Timings.PromptN != 1 {
		t.Errorf("after restore: %d prompt tokens, %d evaluated; want 9 and 1", done.Evaluated, done.Timings.PromptN)
	}
	code, body = post(t, b+"/slots/0?action=erase", `{}`)
	if code != http.StatusOK || !strings.Contains(body, `"n_erased":12`) {
		t.Errorf("erase: %d %s, want 12 erased", code, body)
	}
}

// A save of a busy slot waits until its answer ends (real defers it):
// it saves the whole answer's cache.
func TestSlotSaveWaitsForTheAnswer(t *testing.T) {
	dir := t.TempDir()
	_, base := startHead(t, "--fake-tokens", "20", "--fake-token-rate", "20", "--slot-save-path", dir)
	waitReady(t, base)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		resp, err := client.Post(base+"/completion", "application/json", strings.NewReader(`{"prompt":"one two","stream":true}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	poll(t, "the slot busy", func() bool {
		_, body := get(t, base+"/slots")
		return strings.Contains(body, `"is_processing":true`)
	})
	code, body := post(t, base+"/slots/0?action=save", `{"filename":"busy.slot"}`)
	if code != http.StatusOK || !strings.Contains(body, `"n_saved":22`) {
		t.Errorf("save of a busy slot: %d %s, want the whole answer's 22 tokens", code, body)
	}
	<-ended
}
