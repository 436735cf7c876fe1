//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
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
	code, body, err := realComplete(tr.headHost, tr.headPort, 60*time.Second)
	if err != nil || code != 200 {
		t.Fatalf("a completion from the real head: %d %v %s", code, err, body)
	}
	var answer struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal([]byte(body), &answer)
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
	if e.Key != kvsave.Key("hello") || e.Tokens < 2 || e.Bytes <= 0 {
		t.Errorf("entry %+v: want the key of the prompt \"hello\" and its tokens", e)
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
	q, _ := json.Marshal(map[string]any{"prompt": "hello" + answer.Content, "n_predict": 4, "grammar": "root ::= [a-z ]+", "id_slot": 0})
	resp, err := http.Post(base+"/completion", "application/json", strings.NewReader(string(q)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var done struct {
		Timings struct {
			PromptN int `json:"prompt_n"`
		} `json:"timings"`
		Evaluated int `json:"tokens_evaluated"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&done)
	t.Logf("restored %d tokens (%d bytes, %.2f ms) on another process; the answer's continuation evaluated %d of its %d prompt tokens",
		res.NRestored, res.NRead, res.Timings.RestoreMS, done.Timings.PromptN, done.Evaluated)
	if done.Evaluated == 0 || done.Timings.PromptN > 2 {
		t.Errorf("after the restore the continuation evaluated %d of %d prompt tokens, want 1 or 2", done.Timings.PromptN, done.Evaluated)
	}
}
