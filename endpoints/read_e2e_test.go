//go:build e2e

package endpoints

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file chown'ed to another user (as root, for real) is rejected when
// allowed owners are set, and read when its owner is allowed.
func TestE2EReadDirRealOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := t.TempDir()
	if err := Write(dir, validEndpoint()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName("fast", "1234"))
	const nobody = 65534
	if err := os.Chown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	scan, err := ReadDir(dir, ReadOptions{AllowedUIDs: []uint32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Entries) != 0 || len(scan.Rejected) != 1 || !strings.Contains(scan.Rejected[0].Reason, "uid 65534") {
		t.Errorf("root-only owners: %+v", scan)
	}
	scan, err = ReadDir(dir, ReadOptions{AllowedUIDs: []uint32{0, nobody}})
	if err != nil || len(scan.Entries) != 1 {
		t.Errorf("nobody allowed: %+v, %v", scan, err)
	}
}
