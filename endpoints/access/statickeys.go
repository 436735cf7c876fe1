package access

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// StaticKey is a service account's key from the static keys file.
type StaticKey struct {
	User, Account string
	// Hash is the hex SHA-256 of the key.
	Hash string
	// Line is where the file has it.
	Line int
}

// MaxStaticKeys bounds the static keys file (each request whose key is not
// an issued one is compared with all of them).
const MaxStaticKeys = 1000

// MinStaticKeyLen is the shortest static key taken: a service account's
// key is a secret as long as an issued one's.
const MinStaticKeyLen = 32

// LoadStaticKeys reads the static keys file at path: one key a line,
// "USER ACCOUNT KEY" separated by blanks (ACCOUNT "-" for none), blank
// lines and lines starting with # skipped. The file holds the keys
// themselves, so it must be a regular file that others cannot read or
// write and that root or this process's user owns; otherwise it is
// refused, and the error names it (with the chmod that fixes it). Every
// error names the file, and a bad line its number.
func LoadStaticKeys(path string) ([]StaticKey, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("static keys file %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("static keys file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("static keys file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		return nil, fmt.Errorf("static keys file %s: mode %s lets others read it or its group write it: chmod 600 %s", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("static keys file %s: owned by uid %d, want root or this process's user (uid %d)", path, st.Uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("static keys file %s: %w", path, err)
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("static keys file %s: larger than 1 MiB", path)
	}
	return ParseStaticKeys(path, data)
}

// ParseStaticKeys reads the static keys file's text (file names it in
// errors).
func ParseStaticKeys(file string, data []byte) ([]StaticKey, error) {
	var out []StaticKey
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: want USER ACCOUNT KEY (%d fields)", file, n, len(f))
		}
		user, account, key := f[0], f[1], f[2]
		if !ValidName(user) {
			return nil, fmt.Errorf("%s:%d: user %q: want a user name (letters, digits, ._-)", file, n, user)
		}
		if account == "-" {
			account = ""
		} else if !ValidName(account) {
			return nil, fmt.Errorf("%s:%d: account %q: want an account name (letters, digits, ._-) or -", file, n, account)
		}
		if len(key) < MinStaticKeyLen {
			return nil, fmt.Errorf("%s:%d: the key is %d bytes, want at least %d (make one with llm-upstreams key generate)", file, n, len(key), MinStaticKeyLen)
		}
		h := HashKey(key)
		if prev, dup := seen[h]; dup {
			return nil, fmt.Errorf("%s:%d: the same key as line %d", file, n, prev)
		}
		seen[h] = n
		out = append(out, StaticKey{User: user, Account: account, Hash: h, Line: n})
		if len(out) > MaxStaticKeys {
			return nil, fmt.Errorf("%s:%d: more than %d keys", file, n, MaxStaticKeys)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, nil
}

// ValidName reports whether s can be a user or account name: 1-64 bytes
// of letters, digits, '.', '_' and '-', not starting with '-' (so that it
// is never taken for an option of sacctmgr, nor a key=value).
func ValidName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// matchStatic finds key among the static keys: every one is compared, in
// constant time, whether an earlier one matched or not.
func matchStatic(keys []StaticKey, key string) (StaticKey, bool) {
	h := HashKey(key)
	var found StaticKey
	ok := false
	for _, k := range keys {
		if sameHash(h, k.Hash) && !ok {
			found, ok = k, true
		}
	}
	return found, ok
}
