//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints"
	"slurm-llm/endpoints/kvsave"
	"slurm-llm/slurm/slurmtest"
)

// TestE2ERealLlamaSavesSlotsAtTheDrain (issue 39): the distributed tier
// with real llama.cpp (a head and two rpc-server workers) saving its
// slots ([head] slot_save_dir); a completion served, then scancel: the
// drain saves the slot that holds it (the file holds every layer, read
// from the workers) with its index entry, keyed as the front door keys
// the prompt. Then a plain llama-server on this host (no workers) restores
// the file and goes on from the answer evaluating a token or two, not the
// prompt again.
func TestE2ERealLlamaSavesSlotsAtTheDrain(t *testing.T) {
	rl := needRealLlama(t)
	slurmtest.Need(t, "netns")
	kv, err := os.MkdirTemp("", "slurm-llm-e2e-kv-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(kv, 0o755)
	t.Cleanup(func() { os.RemoveAll(kv) })
	tr := setupE2EWith(t, e2eOptions{real: rl, replace: []string{"[head]\n", fmt.Sprintf("[head]\nslot_save_dir = %q\n", kv)}})
	tr.submit(t)
	tr.waitState(t, endpoints.StateReady, 240*time.Second)
	headBase := "http://" + net.JoinHostPort(tr.headHost, strconv.Itoa(tr.headPort))
	first := complete(t, headBase, -1)
	if first.Evaluated < 100 {
		t.Fatalf("the first completion evaluated %d prompt tokens, want the long prompt's", first.Evaluated)
	}
	if out, err := exec.Command("scancel", tr.jobID).CombinedOutput(); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	e2eWaitFor(t, "the drain's saves", 90*time.Second, func() bool {
		return strings.Contains(tr.log(), "slots saved") || strings.Contains(tr.log(), "gave up saving")
	})
	entries, err := kvsave.Entries(kv)
	if err != nil || len(entries) != 1 {
		t.Fatalf("index entries %+v %v, want the completion's slot\n%s", entries, err, tr.log())
	}
	e := entries[0]
	t.Logf("saved at the drain: %+v", e)
	if e.Key != kvsave.Key(longPrompt) || e.Tokens < first.Evaluated || e.Bytes <= 0 {
		t.Errorf("entry %+v: want the key of the prompt and its %d tokens at least", e, first.Evaluated)
	}

	// Restore it on a plain head, started here with the same model and -c.
	port := faketest.FreePort(t)
	cmd := exec.Command(filepath.Join(rl.bin, "llama-server"), "-m", rl.model, "-c", "512", "--host", "127.0.0.1",
		"--port", strconv.Itoa(port), "--slot-save-path", kv)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+rl.bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	e2eWaitFor(t, "the plain head ready", 120*time.Second, func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	res, err := kvsave.Action(t.Context(), http.DefaultClient, base, nil, "restore", 0, e.File)
	if err != nil || res.NRestored != e.Tokens {
		t.Fatalf("restore: %+v %v, want %d tokens", res, err, e.Tokens)
	}
	done := complete(t, base, 0)
	t.Logf("saved on the distributed head: %d tokens, %d bytes (%.0f B per token); restored on a plain head in %.2f ms; the same prompt then evaluated %d of its %d tokens (%d at first)",
		e.Tokens, e.Bytes, float64(e.Bytes)/float64(e.Tokens), res.Timings.RestoreMS, done.PromptN, done.Evaluated, first.Evaluated)
	if done.Evaluated != first.Evaluated || done.PromptN > 2 {
		t.Errorf("after the restore the prompt evaluated %d of %d tokens, want 1 or 2", done.PromptN, done.Evaluated)
	}
}

// longPrompt is long enough that its evaluation shows (about 180 tokens).
var longPrompt = strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)

// realDone is what the test reads of a /completion answer.
type realDone struct {
	PromptN, Evaluated int
}

// complete asks the head at base for a short completion of longPrompt
// (with a grammar: random weights), pinned to slot (-1: any).
func complete(t *testing.T, base string, slot int) realDone {
	t.Helper()
	q, _ := json.Marshal(map[string]any{"prompt": longPrompt, "n_predict": 8, "grammar": "root ::= [a-z ]+", "id_slot": slot})
	client := &http.Client{Timeout: 120 * time.Second}
	resp, err := client.Post(base+"/completion", "application/json", strings.NewReader(string(q)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Timings struct {
			PromptN int `json:"prompt_n"`
		} `json:"timings"`
		Evaluated int `json:"tokens_evaluated"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion at %s: %d %v", base, resp.StatusCode, err)
	}
	return realDone{PromptN: d.Timings.PromptN, Evaluated: d.Evaluated}
}
