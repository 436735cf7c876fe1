package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/kvsave"
	"slurm-llm/supervisor/tier"
)

// saveRig is a rig whose plan saves the head's slots into a directory of
// its own; the head's model is a small file.
func saveRig(t *testing.T) (*fakeRig, string) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(model, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	kv := filepath.Join(dir, "kv")
	if err := os.Mkdir(kv, 0o755); err != nil {
		t.Fatal(err)
	}
	p := rigPlan(t, 2)
	p.Head.Argv = []string{"head", "-m", model, "--slot-save-path", kv}
	p.SlotSave = tier.SlotSave{Dir: kv}
	g := newFakeRig(t, p)
	g.head.mu.Lock()
	g.head.saveDir = kv
	g.head.slots = `[{"id":0,"is_processing":false,"n_prompt_tokens":40,"prompt":"conversation A"},
		{"id":1,"is_processing":false,"n_prompt_tokens":0},
		{"id":2,"is_processing":true,"n_prompt_tokens":9,"prompt":"still answering"}]`
	g.head.mu.Unlock()
	return g, kv
}

// The drain saves each idle slot that holds a conversation, with its index
// entry beside it, before it stops the head; an empty slot and a busy one
// are not saved.
func TestDrainSavesSlots(t *testing.T) {
	g, kv := saveRig(t)
	g.ready()
	g.r.Stop(StopRequest{Reason: ReasonPreempted})
	g.advanceUntil("stopped", state(StateStopped), 250*time.Millisecond)
	files := g.head.savedFiles()
	if len(files) != 1 {
		t.Fatalf("saved %v, want slot 0's file alone", files)
	}
	entries, err := kvsave.Entries(kv)
	if err != nil {
		t.Fatal(err)
	}
	identity, err := kvsave.Identity(g.plan.Head.Argv)
	if err != nil {
		t.Fatal(err)
	}
	want := []kvsave.Entry{{File: files[0], Tier: "t", JobID: "9", Identity: identity, Key: kvsave.Key("conversation A"),
		Slot: 0, Tokens: 12, Bytes: 2}}
	for i := range entries {
		entries[i].SavedAt = time.Time{}
	}
	if d := cmp.Diff(want, entries); d != "" {
		t.Errorf("index (-want +got):\n%s", d)
	}
	if got := g.l.last("head").how(); got != "stopped" {
		t.Errorf("head %s, want stopped after the saves", got)
	}
}

// A save that does not end is given up at its deadline, inside the drain
// budget: the head is stopped and the run ends as without saves.
func TestDrainGivesUpSavingAtDeadline(t *testing.T) {
	g, _ := saveRig(t)
	hang := make(chan struct{})
	g.head.mu.Lock()
	g.head.hangSave = hang
	g.head.mu.Unlock()
	defer close(hang)
	g.ready()
	start := g.clk.Now()
	g.r.Stop(StopRequest{Reason: ReasonPreempted})
	// Steps of 1 s: the hung save keeps the rig from settling in each.
	seen := g.advanceUntil("stopped", state(StateStopped), time.Second)
	stopped := seen[len(seen)-1].Time
	split := g.plan.Split(0)
	if split.Save <= 0 {
		t.Fatalf("split %+v has no save share", split)
	}
	if took := stopped.Sub(start); took < split.Save || took > split.InFlight+split.Save+time.Second {
		t.Errorf("stopped %s after the notice, want by the save deadline %s", took, split.InFlight+split.Save)
	}
	if files := g.head.savedFiles(); len(files) != 0 {
		t.Errorf("saved %v, want none", files)
	}
}

// Without slot_save_dir nothing is saved: the drain never asks for the
// head's slots.
func TestDrainWithoutSlotSaveSavesNothing(t *testing.T) {
	g := newFakeRig(t, rigPlan(t, 2))
	g.ready()
	g.r.Stop(StopRequest{Reason: ReasonPreempted})
	g.advanceUntil("stopped", state(StateStopped), 250*time.Millisecond)
	if files := g.head.savedFiles(); len(files) != 0 {
		t.Errorf("saved %v without slot_save_dir", files)
	}
}

// With the fake llama-server as the head: a conversation served, then a
// stop; the drain saves its slot into slot_save_dir with an index entry
// whose key is the slot's prompt's, and the run ends as usual.
func TestRunnerSavesSlotsOfFakeHead(t *testing.T) {
	tr := newTier(t, 1)
	kv := t.TempDir()
	model := filepath.Join(t.TempDir(), "test-model.gguf")
	if err := os.WriteFile(model, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.headArgs = append(tr.headArgs, "--fake-tokens", "3", "--fake-token-rate", "0", "--slot-save-path", kv)
	plan := tr.plan(tr.nodes)
	for i, a := range plan.Head.Argv {
		if a == "/models/test-model.gguf" {
			plan.Head.Argv[i] = model
		}
	}
	plan.SlotSave = tier.SlotSave{Dir: kv}
	rn := startRunner(t, plan, Options{})
	until(t, "endpoint ready", func() bool { return endpointState(t, plan) == endpoints.StateReady })
	endpointFile := endpoints.FileName(plan.Tier, plan.JobID)
	until(t, "head file", func() bool { _, err := kvsave.ReadHead(kv, endpointFile); return err == nil })
	identity, _ := kvsave.Identity(plan.Head.Argv)
	if h, _ := kvsave.ReadHead(kv, endpointFile); h.Addr != "127.0.0.1:"+strconv.Itoa(tr.headPort) || h.Identity != identity {
		t.Errorf("head file %+v, want the endpoint's address and identity %s", h, identity)
	}
	resp, err := complete(t, tr.headPort, false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion: %v %v", resp, err)
	}
	resp.Body.Close()
	rn.r.Stop(StopRequest{Reason: ReasonPreempted})
	if err := rn.wait(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if h, err := kvsave.ReadHead(kv, endpointFile); err == nil {
		des, _ := os.ReadDir(kv)
		t.Errorf("head file left after the run: %+v %v", h, des)
	}
	entries, err := kvsave.Entries(kv)
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v %v, want one", entries, err)
	}
	e := entries[0]
	// The fake's template of the request's one message (FACTS.md Q12).
	if e.Key != kvsave.Key("user: hi\n") || e.Tokens != 4 || e.Slot != 0 || e.Tier != "test" {
		t.Errorf("entry %+v", e)
	}
	if st, err := os.Stat(filepath.Join(kv, e.File)); err != nil || st.Size() != e.Bytes {
		t.Errorf("saved file %v %v, want %d bytes", st, err, e.Bytes)
	}
}
