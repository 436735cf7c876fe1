package access

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// fixedRand is a deterministic source of "random" bytes for keys.
func fixedRand(b byte) *bytes.Reader { return bytes.NewReader(bytes.Repeat([]byte{b}, 64)) }

func TestNewKeyShape(t *testing.T) {
	key, id, hash, err := NewKey(fixedRand(1))
	if err != nil {
		t.Fatal(err)
	}
	if id != "0101010101010101" || !strings.HasPrefix(key, KeyPrefix+id+"_") || len(key) != 65 {
		t.Errorf("key %q id %q", key, id)
	}
	if got, ok := KeyID(key); !ok || got != id {
		t.Errorf("KeyID(%q) = %q, %v", key, got, ok)
	}
	if hash != HashKey(key) || len(hash) != 64 {
		t.Errorf("hash %q", hash)
	}
	k2, _, _, _ := NewKey(nil)
	k3, _, _, _ := NewKey(nil)
	if k2 == k3 {
		t.Error("two random keys are the same")
	}
	for _, bad := range []string{"", "sk-no-key-required", "sllm_", "sllm_0101010101010101", "sllm_zz01010101010101_" + strings.Repeat("A", 43),
		"sllm_0101010101010101_short", "xllm_0101010101010101_" + strings.Repeat("A", 43)} {
		if _, ok := KeyID(bad); ok {
			t.Errorf("KeyID(%q) ok", bad)
		}
	}
}

// TestStoreKeepsOnlyHashesAndSurvivesReopen: a key added is found by the
// key itself, not by a key with the same ID and another secret; the file
// holds its hash and never the key, is 0600, and a new Store reads it.
func TestStoreKeepsOnlyHashesAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	now := t0
	clock := func() time.Time { return now }
	s, err := OpenStore(path, clock)
	if err != nil {
		t.Fatal(err)
	}
	key, id, hash, _ := NewKey(fixedRand(2))
	k := Key{ID: id, Hash: hash, User: "alice", UID: 1001, Account: "chem", Created: t0, Expires: t0.Add(time.Hour)}
	if err := s.Add(k); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte(key)) || bytes.Contains(data, []byte(key[len(KeyPrefix)+17:])) {
		t.Fatal("the store's file holds the key")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %s, want 0600", fi.Mode().Perm())
	}
	s2, err := OpenStore(path, clock)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s2.Lookup(key)
	if !ok {
		t.Fatal("the key is not found after reopening")
	}
	if d := cmp.Diff(k, got); d != "" {
		t.Errorf("key (-want +got):\n%s", d)
	}
	forged := key[:len(key)-1] + "B"
	if forged == key {
		forged = key[:len(key)-1] + "C"
	}
	if _, ok := s2.Lookup(forged); ok {
		t.Error("a key with the same ID and another secret is found")
	}
	now = t0.Add(time.Hour)
	if _, ok := s2.Lookup(key); ok {
		t.Error("an expired key is found")
	}
	if got := s2.List(""); len(got) != 0 {
		t.Errorf("expired keys listed: %v", got)
	}
}

func TestStoreRevokeAndList(t *testing.T) {
	s, _ := OpenStore(filepath.Join(t.TempDir(), "keys.json"), func() time.Time { return t0 })
	var keys []string
	for i, u := range []string{"alice", "bob", "alice"} {
		key, id, hash, _ := NewKey(fixedRand(byte(10 + i)))
		keys = append(keys, key)
		if err := s.Add(Key{ID: id, Hash: hash, User: u, Created: t0.Add(time.Duration(i) * time.Minute), Expires: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(ks []Key) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.User+"/"+k.ID[:2])
		}
		return out
	}
	if d := cmp.Diff([]string{"alice/0a", "alice/0c"}, ids(s.List("alice"))); d != "" {
		t.Errorf("alice's keys (-want +got):\n%s", d)
	}
	n, err := s.Revoke(func(k Key) bool { return k.User == "alice" })
	if err != nil || n != 2 {
		t.Fatalf("Revoke = %d, %v", n, err)
	}
	if d := cmp.Diff([]string{"bob/0b"}, ids(s.List(""))); d != "" {
		t.Errorf("after revoking alice's (-want +got):\n%s", d)
	}
	if _, ok := s.Lookup(keys[0]); ok {
		t.Error("a revoked key is found")
	}
	if n, err := s.Revoke(func(Key) bool { return false }); n != 0 || err != nil {
		t.Errorf("Revoke nothing = %d, %v", n, err)
	}
}

func TestOpenStoreRefusesAnOpenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenStore of a 0644 file: %v", err)
	}
	os.Chmod(path, 0o600)
	if _, err := OpenStore(path, nil); err != nil {
		t.Errorf("OpenStore of a 0600 file: %v", err)
	}
	os.WriteFile(path, []byte(`{"version":1,"keys":[],"extra":1}`), 0o600)
	if _, err := OpenStore(path, nil); err == nil {
		t.Error("OpenStore: an unknown field taken")
	}
}
