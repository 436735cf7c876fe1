package tiers

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
)

// writeRaw writes bytes as an endpoint dir's file with mode perm.
func writeRaw(t *testing.T, dir, name string, b []byte, perm os.FileMode) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // WriteFile's mode passes through the umask
		t.Fatal(err)
	}
}

// endpointBytes is e as endpoints.Write writes it.
func endpointBytes(t *testing.T, e endpoints.Endpoint) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := endpoints.Write(dir, e); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, endpoints.FileName(e.Tier, e.JobID)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The scanner is a cache in front of endpoints.ReadDir's rules: over a
// directory holding every kind of file ReadDir accepts or refuses, both
// give the same entries and the same rejections with the same reasons.
func TestScanAgreesWithReadDir(t *testing.T) {
	dir := t.TempDir()
	good := endpointBytes(t, testEndpoint("fast", "1", "10.0.0.1", 8080))
	writeRaw(t, dir, "fast-1.json", good, 0o644)
	writeRaw(t, dir, "fast-2.json", good, 0o644) // content names fast-1
	writeRaw(t, dir, "fast-3.json", []byte("{"), 0o644)
	writeRaw(t, dir, "fast-4.json", endpointBytes(t, testEndpoint("fast", "4", "10.0.0.1", 8080)), 0o664)
	writeRaw(t, dir, "fast-5.json", []byte(strings.Repeat(" ", 200)), 0o644)
	writeRaw(t, dir, ".fast-6.json.tmp-1", good, 0o644)
	writeRaw(t, dir, "notes.txt", good, 0o644)
	if err := os.Symlink(filepath.Join(dir, "fast-1.json"), filepath.Join(dir, "fast-7.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fast-8.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "fast-9.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, dir, "fast-\x1b[31m.json", good, 0o644)
	for _, tt := range []struct {
		name    string
		allowed []uint32
		limit   int64
	}{
		{name: "any owner, default size"},
		{name: "another owner only, small files", allowed: []uint32{uint32(os.Getuid()) + 1}, limit: 100},
		{name: "this owner", allowed: []uint32{uint32(os.Getuid())}, limit: 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := endpoints.ReadDir(dir, endpoints.ReadOptions{AllowedUIDs: tt.allowed, MaxFileSize: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			var s scanner
			for pass := 0; pass < 2; pass++ { // the second from the cache
				got, err := s.scan(dir, tt.allowed, tt.limit)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got.scan); d != "" {
					t.Errorf("pass %d: scan differs from ReadDir (-ReadDir +scan):\n%s", pass, d)
				}
			}
		})
	}
}

// An unchanged file is not parsed again; a file renamed into place (a new
// inode) or rewritten in place is; a file modified within racyWindow of
// being read is parsed again until it is older.
func TestScanCache(t *testing.T) {
	dir := t.TempDir()
	e := testEndpoint("fast", "1", "10.0.0.1", 8080)
	write := func(port int) {
		e.Port = port
		if err := endpoints.Write(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour) // every file looks long settled
	s := scanner{now: func() time.Time { return later }}
	scanPorts := func() ([]int, int) {
		t.Helper()
		res, err := s.scan(dir, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var ports []int
		for _, en := range res.scan.Entries {
			ports = append(ports, en.Endpoint.Port)
		}
		return ports, res.parsed
	}
	type step struct {
		Ports  []int
		Parsed int
	}
	var got []step
	record := func() {
		p, n := scanPorts()
		got = append(got, step{p, n})
	}
	write(8080)
	record() // first read
	record() // unchanged
	write(8081)
	record() // renamed over: new inode
	overwriteInPlace(t, dir, testEndpoint("fast", "1", "10.0.0.1", 8082))
	record() // written in place: new size or mtime
	record() // unchanged again
	want := []step{{[]int{8080}, 1}, {[]int{8080}, 0}, {[]int{8081}, 1}, {[]int{8082}, 1}, {[]int{8082}, 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scans (-want +got):\n%s", d)
	}

	s.now = time.Now // a file just written is too recent to trust
	write(8083)
	if _, n := scanPorts(); n != 1 {
		t.Errorf("a just-modified file: parsed %d, want 1", n)
	}
	if _, n := scanPorts(); n != 1 {
		t.Errorf("a just-modified file, scanned again: parsed %d, want 1 (not cached while racy)", n)
	}
}
