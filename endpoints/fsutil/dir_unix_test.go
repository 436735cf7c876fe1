package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Issue 23: a shared directory another user made first, or one anyone can
// write, or a symlink to elsewhere, is refused with how to fix it; a
// missing one is made, owned by the caller.
func TestCheckAndEnsureDir(t *testing.T) {
	me := uint32(os.Getuid())
	root := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, open := mk("good", 0o755), mk("open", 0o777)
	group := mk("group", 0o775)
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(root, "link")
	os.Symlink(good, link)
	cases := []struct {
		path string
		ok   bool
	}{{good, true}, {group, true}, {open, false}, {file, false}, {link, false}, {filepath.Join(root, "missing"), false}}
	if os.Geteuid() == 0 {
		foreign := mk("foreign", 0o755)
		if err := os.Chown(foreign, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			path string
			ok   bool
		}{foreign, false})
		// A members directory another user created first is not taken.
		if err := EnsureDir(foreign, me); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("EnsureDir on another user's directory: %v, want ErrUnsafeDir", err)
		}
	}
	for _, c := range cases {
		if err := CheckDir(c.path, me); (err == nil) != c.ok {
			t.Errorf("CheckDir(%s) = %v, want ok %v", filepath.Base(c.path), err, c.ok)
		}
	}
	made := filepath.Join(root, "made")
	if err := EnsureDir(made, me); err != nil {
		t.Fatalf("EnsureDir of a missing directory: %v", err)
	}
	if err := EnsureDir(made, me); err != nil {
		t.Errorf("EnsureDir again: %v", err)
	}
}
