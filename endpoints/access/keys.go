package access

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"slurm-llm/endpoints/fsutil"
)

// KeyPrefix starts every key this package makes: "sllm_ID_SECRET", where
// ID (16 hex digits) names the key in lists and logs and is not secret,
// and SECRET is 32 random bytes in unpadded base64url.
const KeyPrefix = "sllm_"

// Key is an issued key as stored: its hash, never the key itself.
type Key struct {
	// ID is the key's public name (the part after KeyPrefix).
	ID string `json:"id"`
	// Hash is the hex SHA-256 of the whole key.
	Hash string `json:"hash"`
	// User and UID are whom munge proved it was made by; Account is the
	// Slurm account its usage is counted under ("" when not known).
	User    string `json:"user"`
	UID     uint32 `json:"uid"`
	Account string `json:"account"`
	// Note is the user's own words for it ("laptop"), at most 64 bytes.
	Note    string    `json:"note,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

// NewKey makes a key from rnd (nil: crypto/rand) and returns it with its
// ID and hash.
func NewKey(rnd io.Reader) (key, id, hash string, err error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var b [8 + 32]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", "", "", fmt.Errorf("make a key: %w", err)
	}
	id = hex.EncodeToString(b[:8])
	key = KeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(b[8:])
	return key, id, HashKey(key), nil
}

// HashKey is the hex SHA-256 of a key as stored. A key has 256 random
// bits, so a fast hash is as good as a slow one here.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// KeyID is the ID of a key of this package's shape; ok is false for
// anything else.
func KeyID(key string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", false
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(secret) != 43 {
		return "", false
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", false
	}
	return id, true
}

// sameHash compares two hex hashes in constant time.
func sameHash(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// Store keeps the issued keys in a JSON file (mode 0600, replaced
// atomically on every change), and in memory as a snapshot that lookups
// read without a lock. One front door writes it. Safe for concurrent use.
type Store struct {
	path string
	now  func() time.Time
	mu   sync.Mutex // serialises changes
	keys atomic.Pointer[map[string]Key]
}

// storeFile is the file's shape.
type storeFile struct {
	Version int   `json:"version"`
	Keys    []Key `json:"keys"`
}

// OpenStore reads the keys at path ("" keeps them in memory only, for
// tests); a missing file is an empty store, one others may read or write
// is refused (the hashes are not the keys, but the file says who has
// keys and when they end).
func OpenStore(path string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{path: path, now: now}
	m := map[string]Key{}
	s.keys.Store(&m)
	if path == "" {
		return s, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read keys %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("keys %s: mode %s lets others read or write it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	var f storeFile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("read keys %s: %w", path, err)
	}
	for _, k := range f.Keys {
		m[k.ID] = k
	}
	return s, nil
}

// Lookup finds the issued key whose ID key carries and checks the whole
// key against its hash in constant time. ok is false when there is no
// such key, it does not match, or it has expired.
func (s *Store) Lookup(key string) (Key, bool) {
	id, ok := KeyID(key)
	if !ok {
		return Key{}, false
	}
	k, found := (*s.keys.Load())[id]
	if !found {
		k = Key{Hash: strings.Repeat("0", 64)} // compare anyway: the same time found or not
	}
	if !sameHash(HashKey(key), k.Hash) || !found || !s.now().Before(k.Expires) {
		return Key{}, false
	}
	return k, true
}

// List is user's keys ("" for everyone's), oldest first, expired ones
// left out.
func (s *Store) List(user string) []Key {
	now := s.now()
	var out []Key
	for _, k := range *s.keys.Load() {
		if (user == "" || k.User == user) && now.Before(k.Expires) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Key) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Add stores k (its file first: a key is handed out only once it is
// kept). Expired keys are dropped from the file on the way.
func (s *Store) Add(k Key) error {
	return s.change(func(m map[string]Key) int {
		m[k.ID] = k
		return 1
	})
}

// Revoke removes the keys match selects and returns how many it removed.
func (s *Store) Revoke(match func(Key) bool) (int, error) {
	n := 0
	err := s.change(func(m map[string]Key) int {
		for id, k := range m {
			if match(k) {
				delete(m, id)
				n++
			}
		}
		return n
	})
	return n, err
}

// change applies edit to a copy of the keys, writes the file when edit
// changed something, and then makes the copy current.
func (s *Store) change(edit func(map[string]Key) int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := make(map[string]Key, len(*s.keys.Load())+1)
	for id, k := range *s.keys.Load() {
		if now.Before(k.Expires) {
			m[id] = k
		}
	}
	if edit(m) == 0 {
		return nil
	}
	if s.path != "" {
		f := storeFile{Version: 1, Keys: make([]Key, 0, len(m))}
		for _, k := range m {
			f.Keys = append(f.Keys, k)
		}
		slices.SortFunc(f.Keys, func(a, b Key) int { return strings.Compare(a.ID, b.ID) })
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return fmt.Errorf("write keys %s: %w", s.path, err)
		}
		if err := fsutil.WriteFile(s.path, append(data, '\n'), 0o600); err != nil {
			return fmt.Errorf("write keys: %w", err)
		}
	}
	s.keys.Store(&m)
	return nil
}
