// Package kvsave is the saved KV cache's contract between the two sides:
// the supervisor saves a head's slots at its drain (llama-server's
// POST /slots/N?action=save into --slot-save-path), and the front door
// restores one on the head that continues a cut stream. It owns the names
// of the saved files, the small index entry written beside each, the
// conversation key both sides compute, the model identity (llama.cpp's
// file has none: a different model of the same shapes restores silently,
// cmd/fake-llama/FACTS.md Q12) and the directory's pruning. Like package
// endpoints it imports neither side.
package kvsave

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"slurm-llm/endpoints/fsutil"
)

// KeyBytes is how much of a prompt's text the conversation key reads: a
// conversation's next turn and a continuation share their beginning, and a
// long prompt is not hashed whole on the request path.
const KeyBytes = 4096

// Key is the conversation key of a prompt's text (llama-server's /slots
// "prompt", the text /apply-template gives for chat messages, or a raw
// /completion prompt): 16 hex digits of the SHA-256 of its first KeyBytes
// bytes once its leading special tokens and blanks are cut (normalize).
// "" for an empty prompt.
func Key(prompt string) string {
	prompt = normalize(prompt)
	if prompt == "" {
		return ""
	}
	if len(prompt) > KeyBytes {
		prompt = prompt[:KeyBytes]
	}
	sum := sha256.Sum256([]byte(prompt))
	return hex.EncodeToString(sum[:8])
}

// normalize cuts a prompt's leading blanks and special tokens ("<s>",
// "<|system|>": a '<', up to 48 bytes without a blank, a '>'): real
// llama-server's /slots shows the slot's tokens detokenized, its BOS and
// SentencePiece's leading space included ("<s> <|system|>be brief…"),
// where /apply-template and a raw prompt have neither (measured,
// cmd/fake-llama/FACTS.md Q12). Both sides cut the same, so a prompt
// that begins with such text itself keys alike on both.
func normalize(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if !strings.HasPrefix(s, "<") {
			return s
		}
		end := strings.IndexByte(s, '>')
		if end < 0 || end > 48 || strings.ContainsAny(s[:end], " \t\r\n") {
			return s
		}
		s = s[end+1:]
	}
}

// identityBytes is how much of the model file the identity reads.
const identityBytes = 1 << 20

// matchFlags are llama-server's flags whose values a restore must match:
// the context and slots (a saved slot must fit: a bare 400 otherwise),
// flash attention and the KV cache's types (a mismatch answers a bare 400
// or, worse, restores bytes read with another layout).
var matchFlags = map[string]string{
	"-c": "ctx", "--ctx-size": "ctx",
	"-np": "parallel", "--parallel": "parallel",
	"-fa": "fa", "--flash-attn": "fa",
	"-ctk": "ctk", "--cache-type-k": "ctk",
	"-ctv": "ctv", "--cache-type-v": "ctv",
}

// ModelPath is the -m/--model value of a llama-server argv; "" when it
// has none (router mode, a model from a URL).
func ModelPath(argv []string) string {
	for i, a := range argv {
		name, val, ok := strings.Cut(a, "=")
		if name != "-m" && name != "--model" {
			continue
		}
		if ok {
			return val
		}
		if i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

// Flags are the values of argv's flags that a restore must match, as
// "name=value" in a fixed order (a flag absent is "name=").
func Flags(argv []string) []string {
	got := map[string]string{}
	for i, a := range argv {
		name, val, ok := strings.Cut(a, "=")
		key, known := matchFlags[name]
		if !known {
			continue
		}
		if !ok && i+1 < len(argv) {
			val = argv[i+1]
		}
		got[key] = val
	}
	out := make([]string, 0, 5)
	for _, k := range []string{"ctx", "parallel", "fa", "ctk", "ctv"} {
		out = append(out, k+"="+got[k])
	}
	return out
}

// Identity is the model identity of a head: 16 hex digits of a hash of its
// model file's size, modification time and first MiB, and of the flags a
// restore must match (Flags). Two heads restore each other's slots only
// when their identities are equal.
func Identity(argv []string) (string, error) {
	path := ModelPath(argv)
	if path == "" {
		return "", errors.New("the head's command names no model file (-m): slots are saved for a single-model head only")
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("model identity: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("model identity: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "size=%d\nmtime=%d\n", st.Size(), st.ModTime().UnixNano())
	if _, err := io.Copy(h, io.LimitReader(f, identityBytes)); err != nil {
		return "", fmt.Errorf("model identity: read %s: %w", path, err)
	}
	for _, fl := range Flags(argv) {
		fmt.Fprintf(h, "%s\n", fl)
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// Entry is the index entry written beside a saved slot file
// (<file>.json): what the file holds and for which heads.
type Entry struct {
	// File is the saved slot's base name in the directory.
	File string `json:"file"`
	// Tier and JobID name the tier and the job whose head saved it.
	Tier  string `json:"tier"`
	JobID string `json:"job_id"`
	// Identity is the saving head's model identity (Identity).
	Identity string `json:"identity"`
	// Key is the conversation key of the slot's prompt (Key).
	Key string `json:"key"`
	// Slot is the slot it was saved from; Tokens and Bytes llama-server's
	// n_saved and n_written.
	Slot   int   `json:"slot"`
	Tokens int   `json:"tokens"`
	Bytes  int64 `json:"bytes"`
	// SavedAt is when the save ended.
	SavedAt time.Time `json:"saved_at"`
}

// indexSuffix ends an index entry's name.
const indexSuffix = ".json"

// slotSuffix ends a saved slot's name.
const slotSuffix = ".slot"

// FileName is the saved slot's base name: tier, identity, key and time,
// a bare name as llama-server takes it (fs_validate_filename).
func FileName(tier, identity, key string, at time.Time) string {
	return fmt.Sprintf("%s-%s-%s-%d%s", tier, identity, key, at.UnixNano(), slotSuffix)
}

// WriteEntry writes e's index entry beside its file, atomically.
func WriteEntry(dir string, e Entry) error {
	return fsutil.WriteJSON(filepath.Join(dir, e.File+indexSuffix), e, 0o644)
}

// Entries reads the index entries of dir, oldest first; an entry that
// cannot be read is skipped (it may be half gone).
func Entries(dir string) ([]Entry, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"+slotSuffix+indexSuffix))
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		var e Entry
		if fsutil.ReadJSON(n, &e) != nil || e.File+indexSuffix != filepath.Base(n) {
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SavedAt.Before(out[j].SavedAt) })
	return out, nil
}

// Find is the newest entry of dir for tier, identity and key whose file
// exists.
func Find(dir, tier, identity, key string) (Entry, bool) {
	if key == "" || identity == "" {
		return Entry{}, false
	}
	entries, _ := Entries(dir)
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Tier != tier || e.Identity != identity || e.Key != key {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.File)); err == nil {
			return e, true
		}
	}
	return Entry{}, false
}

// Remove removes a saved slot and its index entry (once restored, or
// pruned); a file already gone is no error.
func Remove(dir, file string) error {
	var errs []error
	for _, n := range []string{file, file + indexSuffix} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Head is what a supervisor publishes in the directory about its head,
// beside its endpoint file's name (<tier>-<job>.head.json): the front door
// restores a saved slot on a head only when the identities are equal.
type Head struct {
	// Addr is the head's host:port as its endpoint file publishes it.
	Addr string `json:"addr"`
	// Identity is its model identity (Identity).
	Identity string `json:"identity"`
}

// headSuffix ends a head file's name.
const headSuffix = ".head.json"

// headPath is the head file of the endpoint file named endpointFile.
func headPath(dir, endpointFile string) string {
	return filepath.Join(dir, strings.TrimSuffix(filepath.Base(endpointFile), ".json")+headSuffix)
}

// WriteHead publishes h for the endpoint file named endpointFile.
func WriteHead(dir, endpointFile string, h Head) error {
	return fsutil.WriteJSON(headPath(dir, endpointFile), h, 0o644)
}

// ReadHead reads the head file of the endpoint file named endpointFile.
// A missing file is an error (os.ErrNotExist).
func ReadHead(dir, endpointFile string) (Head, error) {
	var h Head
	b, err := os.ReadFile(headPath(dir, endpointFile))
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("head file %s: %w", headPath(dir, endpointFile), err)
	}
	return h, nil
}

// RemoveHead removes it (the run ended).
func RemoveHead(dir, endpointFile string) error {
	err := os.Remove(headPath(dir, endpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
