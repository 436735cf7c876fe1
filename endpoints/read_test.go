package endpoints

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeRaw puts b into dir/name with mode perm, bypassing Write's validation.
func writeRaw(t *testing.T, dir, name string, b []byte, perm os.FileMode) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // umask may have masked bits
		t.Fatal(err)
	}
}

// canonical is the file Write makes of validEndpoint.
func canonical(t *testing.T) []byte {
	t.Helper()
	b, err := Marshal(validEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawJSON is the canonical file of validEndpoint with one string replaced.
func rawJSON(t *testing.T, old, new string) []byte {
	t.Helper()
	b, err := Marshal(validEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("canonical file has no %q", old)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

func TestReadDirRejects(t *testing.T) {
	uid := uint32(os.Getuid())
	tests := []struct {
		name   string
		setup  func(t *testing.T, dir, outside string)
		opts   ReadOptions
		reason string // substring of the one rejection; "" means accepted
	}{
		{name: "valid", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", canonical(t), 0o644)
		}, reason: ""},
		{name: "host with semicolon", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"host": "node1"`, `"host": "node1;include /x"`), 0o644)
		}, reason: "host"},
		{name: "host with brace", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"host": "node1"`, `"host": "node1}"`), 0o644)
		}, reason: "host"},
		{name: "host with newline", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"host": "node1"`, `"host": "node1\nserver evil:1;"`), 0o644)
		}, reason: "host"},
		{name: "host with space", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"host": "node1"`, `"host": "node1 backup"`), 0o644)
		}, reason: "host"},
		{name: "port 0", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"port": 8080`, `"port": 0`), 0o644)
		}, reason: "port"},
		{name: "port 70000", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"port": 8080`, `"port": 70000`), 0o644)
		}, reason: "port"},
		{name: "port as string", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"port": 8080`, `"port": "8080"`), 0o644)
		}, reason: "parse"},
		{name: "unknown field", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"port": 8080`, `"port": 8080, "backup": true`), 0o644)
		}, reason: "unknown field"},
		{name: "schema 3", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"schema": 2`, `"schema": 3`), 0o644)
		}, reason: "schema version 3"},
		{name: "schema 1 with a field of schema 2", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"schema": 2`, `"schema": 1`), 0o644)
		}, reason: "not in schema 1"},
		{name: "run id not hex", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"run_id": "0123456789abcdef"`, `"run_id": "../../etc/passwd"`), 0o644)
		}, reason: "run_id"},
		{name: "negative in flight", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", rawJSON(t, `"in_flight": 2`, `"in_flight": -1`), 0o644)
		}, reason: "in_flight"},
		{name: "trailing data", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", append(canonical(t), "{}"...), 0o644)
		}, reason: "after top-level value"},
		{name: "name does not match tier", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "reasoning-1234.json", canonical(t), 0o644)
		}, reason: "does not match"},
		{name: "10 MB file", setup: func(t *testing.T, dir, _ string) {
			big := canonical(t)
			big = append(big[:len(big)-2], bytes.Repeat([]byte(" "), 10<<20)...)
			writeRaw(t, dir, "fast-1234.json", append(big, "}\n"...), 0o644)
		}, reason: "larger than"},
		{name: "world writable", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", canonical(t), 0o666)
		}, reason: "writable by group or others"},
		{name: "group writable", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", canonical(t), 0o664)
		}, reason: "writable by group or others"},
		{name: "symlink to a file outside", setup: func(t *testing.T, dir, outside string) {
			target := filepath.Join(outside, "fast-1234.json")
			writeRaw(t, outside, "fast-1234.json", canonical(t), 0o644)
			if err := os.Symlink(target, filepath.Join(dir, "fast-1234.json")); err != nil {
				t.Fatal(err)
			}
		}, reason: "symlink"},
		{name: "directory named json", setup: func(t *testing.T, dir, _ string) {
			if err := os.Mkdir(filepath.Join(dir, "fast-1234.json"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, reason: "not a regular file"},
		{name: "owner not allowed", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", canonical(t), 0o644)
		}, opts: ReadOptions{AllowedUIDs: []uint32{uid + 1}}, reason: "not an allowed owner"},
		{name: "owner allowed", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", canonical(t), 0o644)
		}, opts: ReadOptions{AllowedUIDs: []uint32{uid + 1, uid}}, reason: ""},
		{name: "not json", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", []byte("server evil:80;"), 0o644)
		}, reason: "parse"},
		{name: "empty file", setup: func(t *testing.T, dir, _ string) {
			writeRaw(t, dir, "fast-1234.json", nil, 0o644)
		}, reason: "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, outside := t.TempDir(), t.TempDir()
			tt.setup(t, dir, outside)
			scan, err := ReadDir(dir, tt.opts)
			if err != nil {
				t.Fatalf("ReadDir: %v", err)
			}
			if tt.reason == "" {
				if len(scan.Entries) != 1 || len(scan.Rejected) != 0 {
					t.Fatalf("want 1 entry and no rejection, got %+v", scan)
				}
				return
			}
			if len(scan.Entries) != 0 || len(scan.Rejected) != 1 {
				t.Fatalf("want 0 entries and 1 rejection, got %+v", scan)
			}
			if !strings.Contains(scan.Rejected[0].Reason, tt.reason) {
				t.Errorf("reason %q does not mention %q", scan.Rejected[0].Reason, tt.reason)
			}
		})
	}
}

// One bad file among good ones is rejected alone; temp and other files are ignored.
func TestReadDirOneBadFileDoesNotAffectOthers(t *testing.T) {
	dir := t.TempDir()
	a, b := validEndpoint(), validEndpoint()
	b.Tier, b.JobID, b.Host = "reasoning", "99_3", "10.1.2.3"
	for _, e := range []Endpoint{a, b} {
		if err := Write(dir, e); err != nil {
			t.Fatal(err)
		}
	}
	writeRaw(t, dir, "fast-7.json", []byte(`{"schema":1,"host":"x;"}`), 0o644)
	writeRaw(t, dir, ".fast-1234.json.tmp-123", []byte("partial"), 0o644)
	writeRaw(t, dir, "README.txt", []byte("not an endpoint"), 0o644)
	writeRaw(t, dir, "bad\nname.json", []byte("{}"), 0o644)
	scan, err := ReadDir(dir, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := Scan{
		Entries: []Entry{{File: "fast-1234.json", Endpoint: a}, {File: "reasoning-99_3.json", Endpoint: b}},
	}
	got := Scan{Entries: scan.Entries}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
	var names []string
	for _, r := range scan.Rejected {
		names = append(names, r.File)
	}
	if d := cmp.Diff([]string{`"bad\nname.json"`, "fast-7.json"}, names); d != "" {
		t.Errorf("rejected files (-want +got):\n%s", d)
	}
}

func TestReadDirMissingDir(t *testing.T) {
	if _, err := ReadDir(filepath.Join(t.TempDir(), "nope"), ReadOptions{}); err == nil {
		t.Errorf("ReadDir of a missing dir = nil error")
	}
}

// FuzzParse feeds arbitrary bytes to the parser of untrusted files: it must
// not panic, and whatever it accepts must be valid and survive a
// write/parse round trip unchanged (and render safely: nginx's
// FuzzRenderParsed).
func FuzzParse(f *testing.F) {
	good, _ := Marshal(validEndpoint())
	f.Add(good)
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`{"schema":1,"tier":"fast","job_id":"1","host":"a;b","port":1}`))
	f.Add(bytes.Replace(good, []byte(`"node1"`), []byte(`"fd00::1"`), 1))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b)
		if err != nil {
			return
		}
		if err := Validate(e); err != nil {
			t.Fatalf("Parse accepted an invalid endpoint: %v", err)
		}
		if strings.ContainsAny(e.Host, " ;{}\"'\n\r\t\\$#") || e.Port < 1 || e.Port > 65535 {
			t.Fatalf("Parse accepted an unsafe host:port %q:%d", e.Host, e.Port)
		}
		again, err := Marshal(e)
		if err != nil {
			t.Fatalf("marshal accepted endpoint: %v", err)
		}
		e2, err := Parse(again)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if d := cmp.Diff(e, e2); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

// TestPublicRule: what the public 503 says of a refused file is a fixed
// rule, never the file's words (a heartbeat of `127.0.0.1:1; } server
// PWNED:80; #` was quoted into every client's 503).
func TestPublicRule(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{`parse: parsing time "127.0.0.1:1; } server PWNED:80; #" as "2006-01-02T15:04:05Z07:00": cannot parse`, "its content is not a valid endpoint file"},
		{`invalid: tier "PWNED": want 1-32 characters of [a-z0-9_-]`, "its content is not a valid endpoint file"},
		{"is a symlink", "it is a symlink"},
		{"not a regular file (p---------)", "it is not a regular file"},
		{"writable by group or others (mode 0o666)", "others can write it"},
		{"owned by uid 1001, not an allowed owner", "its owner is not an allowed owner"},
		{"larger than 65536 bytes (70000)", "it is larger than max_file_size"},
		{"open: permission denied", "it cannot be read"},
		{"file name does not match content: want fast-12.json", "its name does not match its tier and job id"},
		{"anything else a reader may say one day", "its content is not a valid endpoint file"},
	} {
		if got := PublicRule(tc.reason); got != tc.want {
			t.Errorf("PublicRule(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}
