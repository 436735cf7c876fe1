package front

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/kvsave"
	"slurm-llm/endpoints/tiers"
)

// savedSlotsHead is what a head of llama-server with --slot-save-path answers
// about its slots (FACTS.md Q12), for the front door's restore.
type savedSlotsHead struct {
	mu       sync.Mutex
	keyed    int      // /apply-template asked
	restored []string // files asked to restore, with their slot
	refuse   bool     // answer a restore 400 (another -fa or context)
}

func (sh *savedSlotsHead) serve(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.URL.Path == "/apply-template":
		sh.mu.Lock()
		sh.keyed++
		sh.mu.Unlock()
		io.WriteString(w, `{"prompt":"<user>count</user>"}`)
	case r.URL.Path == "/slots" && r.Method == http.MethodGet:
		io.WriteString(w, `[{"id":0,"is_processing":true,"n_prompt_tokens":7,"prompt":"x"},{"id":1,"is_processing":false,"n_prompt_tokens":0}]`)
	case strings.HasPrefix(r.URL.Path, "/slots/") && r.URL.Query().Get("action") == "restore":
		var body struct {
			Filename string `json:"filename"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if sh.refuse {
			http.Error(w, `{"error":{"code":400}}`, http.StatusBadRequest)
			return true
		}
		sh.restored = append(sh.restored, strings.TrimPrefix(r.URL.Path, "/slots/")+" "+body.Filename)
		io.WriteString(w, `{"id_slot":1,"filename":"`+body.Filename+`","n_restored":7,"n_read":5488,"timings":{"restore_ms":1.2}}`)
	default:
		return false
	}
	return true
}

func (sh *savedSlotsHead) asked() []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]string(nil), sh.restored...)
}

// restoreRig is a rig whose front door reads dir for saved slots, a head a
// that cuts its stream and a head b (job 102, identity "idB") that
// continues it, and one saved slot of the conversation for identity.
func restoreRig(t *testing.T, identity string) (*rig, *testHead, *testHead, *savedSlotsHead, string, string) {
	dir := t.TempDir()
	r := newRig(t, func(c *Config) { c.SlotSaveDir = dir })
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.setMode("cut")
	a.tokens, b.tokens = 4, 4
	sh := &savedSlotsHead{}
	b.extra = sh.serve
	if err := kvsave.WriteHead(dir, endpoints.FileName("fast", "102"), kvsave.Head{Addr: b.addr(), Identity: "idB"}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	key := kvsave.Key("<user>count</user>")
	file := kvsave.FileName("fast", identity, key, at)
	if err := os.WriteFile(filepath.Join(dir, file), []byte("kv"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := kvsave.WriteEntry(dir, kvsave.Entry{File: file, Tier: "fast", JobID: "101", Identity: identity, Key: key, SavedAt: at}); err != nil {
		t.Fatal(err)
	}
	return r, a, b, sh, dir, file
}

// continueOnB cuts a's stream and continues it on b once b is routed; it
// returns the continuation's body as b received it.
func continueOnB(t *testing.T, r *rig, a, b *testHead) (answer, map[string]any) {
	r.route(nil, a)
	done := make(chan answer, 1)
	go func() {
		got, _ := r.streamAnswer("/v1/chat/completions", "", userMsg)
		done <- got
	}()
	waitFor(t, "the continuation held", func() bool { return r.held("fast") == 1 })
	r.route(nil, b)
	got := <-done
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) != 1 {
		t.Fatalf("b got %d requests, want the continuation", len(b.bodies))
	}
	return got, b.bodies[0]
}

// A cut stream is continued on a head that first restored the
// conversation's saved slot into a free slot, pinned to it; the file is
// removed once restored; the metric and the access log say so.
func TestContinuationRestoresSavedSlot(t *testing.T) {
	r, a, b, sh, dir, file := restoreRig(t, "idB")
	got, body := continueOnB(t, r, a, b)
	if !got.done || got.errEvent != "" {
		t.Fatalf("answer %+v", got)
	}
	if d := sh.asked(); len(d) != 1 || d[0] != "1 "+file {
		t.Errorf("restores asked %v, want slot 1 from %s", d, file)
	}
	if body["id_slot"] != float64(1) || body["cache_prompt"] != true {
		t.Errorf("continuation id_slot %v cache_prompt %v, want 1 and true", body["id_slot"], body["cache_prompt"])
	}
	if _, err := os.Stat(filepath.Join(dir, file)); !os.IsNotExist(err) {
		t.Errorf("restored file still there (%v)", err)
	}
	if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", "continued", "true")); n != 1 {
		t.Errorf("continued{restored=true} %v, want 1", n)
	}
	r.s.Close()
	if log := r.accessLog(); !strings.Contains(log, "continued=1 moved=0 restored=1 pause_ms=") {
		t.Errorf("access log:\n%s", log)
	}
}

// Any failure of the restore sends the continuation as before: a file of
// another model identity is not restored, and a head that refuses the
// file (another -fa or context: a 400) is continued on without it.
func TestContinuationWithoutRestore(t *testing.T) {
	tests := []struct {
		name     string
		identity string
		refuse   bool
		asked    int
	}{
		{name: "another model identity", identity: "idOther"},
		{name: "the head refuses the file", identity: "idB", refuse: true, asked: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, a, b, sh, dir, file := restoreRig(t, tt.identity)
			sh.refuse = tt.refuse
			got, body := continueOnB(t, r, a, b)
			if !got.done || got.errEvent != "" {
				t.Fatalf("answer %+v", got)
			}
			if n := len(sh.asked()); n != tt.asked {
				t.Errorf("restores done %d, want %d", n, tt.asked)
			}
			if _, pinned := body["id_slot"]; pinned {
				t.Errorf("continuation pinned to slot %v without a restore", body["id_slot"])
			}
			if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
				t.Errorf("saved file removed although not restored: %v", err)
			}
			if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", "continued", "false")); n != 1 {
				t.Errorf("continued{restored=false} %v, want 1", n)
			}
		})
	}
}

// The preemption of a tier's only head, with a stream in flight: its
// drain saves its slots (a head file says so), so the front door cuts the
// stream at once rather than leave it to the stop (its slot then goes idle
// and is saved), holds the continuation, and on the next head waits for
// the save, restores it and continues there, pinned to the slot.
func TestDrainingSaverIsLeftAndRestored(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, func(c *Config) { c.SlotSaveDir = dir })
	a, b := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "102", "qwen-a")
	a.gate = make(chan struct{})
	a.tokens, b.tokens = 4, 4
	sh := &savedSlotsHead{}
	b.extra = sh.serve
	for _, h := range []*testHead{a, b} {
		if err := kvsave.WriteHead(dir, endpoints.FileName("fast", h.job), kvsave.Head{Addr: h.addr(), Identity: "id"}); err != nil {
			t.Fatal(err)
		}
	}
	r.route(nil, a)
	done := make(chan answer, 1)
	go func() {
		got, _ := r.streamAnswer("/v1/chat/completions", "", userMsg)
		done <- got
	}()
	r.waitFirstToken()
	now := time.Now()
	r.s.Update(tiers.Report{Time: now, Live: map[string][]endpoints.Server{},
		Decisions: []endpoints.Decision{draining("101", now)},
		Views:     []tiers.TierView{{Tier: "fast", State: tiers.StateRouted, Reason: tiers.ReasonRouted}}})
	select { // a's next token: after it the splicer sees a draining
	case a.gate <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("a never asked for its next token")
	}
	select {
	case <-a.left:
	case <-time.After(10 * time.Second):
		t.Fatal("a's stream was not left although its drain saves its slot")
	}
	waitFor(t, "the continuation held", func() bool { return r.held("fast") == 1 })
	r.route(nil, b)
	waitFor(t, "b asked for the conversation's key", func() bool { sh.mu.Lock(); defer sh.mu.Unlock(); return sh.keyed > 0 })
	// a's supervisor saves the slot now that it is idle.
	key := kvsave.Key("<user>count</user>")
	file := kvsave.FileName("fast", "id", key, now)
	if err := os.WriteFile(filepath.Join(dir, file), []byte("kv"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := kvsave.WriteEntry(dir, kvsave.Entry{File: file, Tier: "fast", JobID: "101", Identity: "id", Key: key, SavedAt: now}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if !got.done || got.errEvent != "" {
		t.Fatalf("answer %+v", got)
	}
	if d := sh.asked(); len(d) != 1 || d[0] != "1 "+file {
		t.Errorf("restores asked %v, want slot 1 from %s", d, file)
	}
	if n := testutil.ToFloat64(r.s.metrics.continued.WithLabelValues("fast", "continued", "true")); n != 1 {
		t.Errorf("continued{restored=true} %v, want 1", n)
	}
}
