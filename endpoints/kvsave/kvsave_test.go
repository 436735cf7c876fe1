package kvsave

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("a", KeyBytes)
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{name: "empty is no key", a: "", b: "", same: true},
		{name: "same prompt", a: "hello", b: "hello", same: true},
		{name: "another prompt", a: "hello", b: "hullo", same: false},
		{name: "only the first KeyBytes count", a: long + "x", b: long + "y", same: true},
		// real llama-server's /slots against /apply-template and a raw
		// prompt (measured, FACTS.md Q12)
		{name: "a slot's chat prompt and its template",
			a: "<s> <|system|>be brief\n<|user|>hello there\n<|assistant|>", b: "<|system|>be brief\n<|user|>hello there\n<|assistant|>", same: true},
		{name: "a slot's raw prompt and the prompt", a: "<s> once upon a time", b: "once upon a time", same: true},
		{name: "another conversation after the tokens", a: "<s> <|user|>hello", b: "<|user|>hullo", same: false},
		{name: "a '<' that is no token", a: "<s> a < b and c > d", b: "a < b and c > d", same: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Key(tc.a) == Key(tc.b); got != tc.same {
				t.Errorf("Key(%.10q) == Key(%.10q): %v, want %v", tc.a, tc.b, got, tc.same)
			}
		})
	}
	if Key("") != "" || len(Key("x")) != 16 {
		t.Errorf("Key: empty %q, one letter %q", Key(""), Key("x"))
	}
}

func TestFlagsAndModelPath(t *testing.T) {
	argv := []string{"llama-server", "-m", "/m/a.gguf", "--host", "h", "-c", "8192", "--flash-attn=on", "-ctv", "q4_0"}
	if d := cmp.Diff([]string{"ctx=8192", "parallel=", "fa=on", "ctk=", "ctv=q4_0"}, Flags(argv)); d != "" {
		t.Errorf("Flags (-want +got):\n%s", d)
	}
	if got := ModelPath(argv); got != "/m/a.gguf" {
		t.Errorf("ModelPath = %q", got)
	}
	if got := ModelPath([]string{"llama-server", "--model=/x.gguf"}); got != "/x.gguf" {
		t.Errorf("ModelPath(--model=) = %q", got)
	}
	if got := ModelPath([]string{"llama-server", "--models-dir", "/m"}); got != "" {
		t.Errorf("ModelPath(router) = %q", got)
	}
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(model, []byte("GGUF model"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"llama-server", "-m", model, "-c", "4096"}
	id1, err := Identity(base)
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := Identity(append(base, "--port", "9"))
	if id1 != id2 {
		t.Errorf("a flag that need not match changed the identity")
	}
	if id3, _ := Identity(append(base, "-fa", "off")); id3 == id1 {
		t.Errorf("-fa off did not change the identity")
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(model, later, later); err != nil {
		t.Fatal(err)
	}
	if id4, _ := Identity(base); id4 == id1 {
		t.Errorf("another mtime did not change the identity")
	}
	if _, err := Identity([]string{"llama-server", "--models-dir", dir}); err == nil {
		t.Errorf("a router head has an identity")
	}
}

func writeSaved(t *testing.T, dir string, e Entry, size int, at time.Time) {
	t.Helper()
	path := filepath.Join(dir, e.File)
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
	if err := WriteEntry(dir, e); err != nil {
		t.Fatal(err)
	}
}

func TestFindAndRemove(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	older := Entry{File: FileName("r", "id", "k", t0), Tier: "r", Identity: "id", Key: "k", SavedAt: t0}
	newer := Entry{File: FileName("r", "id", "k", t0.Add(time.Second)), Tier: "r", Identity: "id", Key: "k", SavedAt: t0.Add(time.Second)}
	other := Entry{File: FileName("r", "id2", "k", t0.Add(2*time.Second)), Tier: "r", Identity: "id2", Key: "k", SavedAt: t0.Add(2 * time.Second)}
	for _, e := range []Entry{older, newer, other} {
		writeSaved(t, dir, e, 10, e.SavedAt)
	}
	got, ok := Find(dir, "r", "id", "k")
	if !ok || got.File != newer.File {
		t.Fatalf("Find = %v %v, want the newer", got.File, ok)
	}
	if _, ok := Find(dir, "r", "id3", "k"); ok {
		t.Errorf("found a file of another identity")
	}
	if err := Remove(dir, newer.File); err != nil {
		t.Fatal(err)
	}
	if got, ok := Find(dir, "r", "id", "k"); !ok || got.File != older.File {
		t.Errorf("after removing the newer, Find = %v %v, want the older", got.File, ok)
	}
	if err := Remove(dir, newer.File); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}

func TestPrune(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	mk := func(i int) Entry {
		at := t0.Add(time.Duration(i) * time.Minute)
		return Entry{File: FileName("r", "id", "k", at), Tier: "r", SavedAt: at}
	}
	tests := []struct {
		name   string
		now    time.Time
		b      Bounds
		remain []int
	}{
		{name: "no bounds keep all", now: t0.Add(time.Hour), remain: []int{0, 1, 2}},
		{name: "ttl removes the old", now: t0.Add(11 * time.Minute), b: Bounds{TTL: 10 * time.Minute}, remain: []int{1, 2}},
		{name: "bytes remove the oldest first", now: t0, b: Bounds{MaxBytes: 250}, remain: []int{1, 2}},
		{name: "both", now: t0.Add(12 * time.Minute), b: Bounds{TTL: 10 * time.Minute, MaxBytes: 50}, remain: []int{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := 0; i < 3; i++ {
				writeSaved(t, dir, mk(i), 100, mk(i).SavedAt)
			}
			// an index entry without its file goes too
			if err := WriteEntry(dir, Entry{File: FileName("r", "id", "gone", t0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := Prune(dir, tc.now, tc.b); err != nil {
				t.Fatal(err)
			}
			entries, _ := Entries(dir)
			got := []string{}
			for _, e := range entries {
				got = append(got, e.File)
			}
			want := []string{}
			for _, i := range tc.remain {
				want = append(want, mk(i).File)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("entries left (-want +got):\n%s", d)
			}
		})
	}
}
