package scripts

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// deps lists every package the package at ../endpoints/room imports,
// directly or not.
func deps(t *testing.T, room string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "../endpoints/"+room).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", room, err, out)
	}
	return strings.Fields(string(out))
}

// TestControllerRooms keeps the controller's rooms apart (README's
// package map): the core (endpoints/tiers) imports no consumer of its
// passes, the front door never imports nginx, and access imports no
// controller room. The front door's own rooms (its subpackages) import
// neither the front door itself nor a controller room their work does not
// need, and wire and rawconn (bytes and sockets) nothing of this module.
// A new import across these lines fails here, naming it.
func TestControllerRooms(t *testing.T) {
	const mod = "slurm-llm/endpoints/"
	for _, c := range []struct {
		room   string
		forbid []string
	}{
		{"tiers", []string{"nginx", "front", "access"}},
		{"front", []string{"nginx"}},
		{"access", []string{"tiers", "nginx", "front", "keeper", "config"}},
		{"keeper", []string{"tiers", "nginx", "front", "access", "config"}},
		{"nginx", []string{"front", "access"}},
	} {
		for _, f := range c.forbid {
			for _, d := range deps(t, c.room) {
				if d == mod+f || strings.HasPrefix(d, mod+f+"/") {
					t.Errorf("endpoints/%s imports %s (directly or not)", c.room, d)
				}
			}
		}
	}

	// The controller rooms a room of the front door may need, by room;
	// one not listed needs none.
	needs := map[string][]string{
		"front/accesslog": {"access"}, // who sent a request (access.Identity)
		"front/hold":      {"tiers"},  // the hold rule reads a tier's view
	}
	controller := []string{"config", "tiers", "nginx", "access", "keeper"}
	out, err := exec.Command("go", "list", "../endpoints/front/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ../endpoints/front/...: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		room := strings.TrimPrefix(p, mod)
		if room == "front" {
			continue
		}
		// What a needed room imports comes with it (tiers reads the
		// keeper's file).
		granted := map[string]bool{}
		for _, r := range needs[room] {
			for _, d := range deps(t, r) {
				granted[d] = true
			}
		}
		for _, d := range deps(t, room) {
			if d == mod+"front" {
				t.Errorf("endpoints/%s imports the front door itself (directly or not)", room)
			}
			for _, r := range controller {
				if (d == mod+r || strings.HasPrefix(d, mod+r+"/")) && !granted[d] {
					t.Errorf("endpoints/%s imports %s (directly or not)", room, d)
				}
			}
		}
	}
	for _, room := range []string{"front/wire", "front/rawconn"} {
		for _, d := range deps(t, room) {
			if strings.HasPrefix(d, "slurm-llm/") && d != "slurm-llm/endpoints/"+room {
				t.Errorf("endpoints/%s imports %s: it stands on the standard library alone", room, d)
			}
		}
	}
}

// maxRoomLines is the bound on one room: the lines of a package's non-test
// Go files (its build-tagged ones included).
const maxRoomLines = 4000

// TestRoomSize keeps every package of the module at most maxRoomLines
// lines of non-test Go: a package past it is several rooms in one, to be
// split into rooms named for what they do. It names each package over the
// bound, with its count.
func TestRoomSize(t *testing.T) {
	lines := map[string]int{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines[filepath.Dir(path)] += bytes.Count(b, []byte("\n"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 10 {
		t.Fatalf("only %d packages found from ..: not the module's root?", len(lines))
	}
	for _, dir := range slices.Sorted(maps.Keys(lines)) {
		if n := lines[dir]; n > maxRoomLines {
			rel, _ := filepath.Rel("..", dir)
			t.Errorf("%s: %d lines of non-test Go, more than %d: split it into rooms named for what they do", filepath.ToSlash(rel), n, maxRoomLines)
		}
	}
}
