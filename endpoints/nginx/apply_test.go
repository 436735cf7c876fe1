package nginx

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
)

// fakeNginx records commands and fails the ones named in fail. When it runs
// the test command it snapshots the output dir, so a test can check what
// nginx -t saw.
type fakeNginx struct {
	dir   string
	fail  map[string]bool // "test" or "reload"
	calls []string
	seen  map[string]string // files present at the last test
}

func (f *fakeNginx) Run(_ context.Context, argv []string) ([]byte, error) {
	kind := "reload"
	if strings.Contains(strings.Join(argv, " "), "-t") {
		kind = "test"
		f.seen = readDirFiles(f.dir)
	}
	f.calls = append(f.calls, kind)
	if f.fail[kind] {
		return []byte("nginx: [emerg] broken"), errors.New("exit status 1")
	}
	return nil, nil
}

// readDirFiles maps each visible file of dir to its content.
func readDirFiles(dir string) map[string]string {
	out := map[string]string{}
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, de.Name()))
		out[de.Name()] = string(b)
	}
	return out
}

func ups(files ...string) []Upstream {
	var out []Upstream
	for i := 0; i+1 < len(files); i += 2 {
		out = append(out, Upstream{File: files[i], Bytes: []byte(files[i+1])})
	}
	return out
}

func TestApply(t *testing.T) {
	tests := []struct {
		name      string
		before    map[string]string // files on disk before, "" stamp from applying it
		apply     []Upstream
		fail      map[string]bool
		wantCalls []string
		wantFiles map[string]string
		wantErr   error
	}{
		{name: "first apply writes, tests, reloads", apply: ups("upstream-a.conf", "A1"),
			wantCalls: []string{"test", "reload"}, wantFiles: map[string]string{"upstream-a.conf": "A1"}},
		{name: "unchanged does nothing", before: map[string]string{"upstream-a.conf": "A1"}, apply: ups("upstream-a.conf", "A1"),
			wantCalls: nil, wantFiles: map[string]string{"upstream-a.conf": "A1"}},
		{name: "changed file reloads", before: map[string]string{"upstream-a.conf": "A1", "upstream-b.conf": "B1"},
			apply:     ups("upstream-a.conf", "A2", "upstream-b.conf", "B1"),
			wantCalls: []string{"test", "reload"}, wantFiles: map[string]string{"upstream-a.conf": "A2", "upstream-b.conf": "B1"}},
		{name: "test fails, old files restored", before: map[string]string{"upstream-a.conf": "A1"},
			apply: ups("upstream-a.conf", "A2", "upstream-b.conf", "B2"), fail: map[string]bool{"test": true},
			wantCalls: []string{"test"}, wantFiles: map[string]string{"upstream-a.conf": "A1"}, wantErr: ErrTestFailed},
		{name: "reload fails, old files restored", before: map[string]string{"upstream-a.conf": "A1"},
			apply: ups("upstream-a.conf", "A2"), fail: map[string]bool{"reload": true},
			wantCalls: []string{"test", "reload"}, wantFiles: map[string]string{"upstream-a.conf": "A1"}, wantErr: ErrReloadFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := &fakeNginx{dir: dir}
			a := &Applier{Dir: dir, Test: []string{"nginx", "-t"}, Reload: []string{"nginx", "-s", "reload"}, Runner: f, Log: hclog.NewNullLogger()}
			if tt.before != nil {
				var prev []Upstream
				for _, name := range slices.Sorted(maps.Keys(tt.before)) {
					prev = append(prev, Upstream{File: name, Bytes: []byte(tt.before[name])})
				}
				if _, err := a.Apply(context.Background(), prev); err != nil {
					t.Fatal(err)
				}
				f.calls = nil
			}
			f.fail = tt.fail
			_, err := a.Apply(context.Background(), tt.apply)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply = %v, want %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.wantCalls, f.calls); d != "" {
				t.Errorf("nginx calls (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantFiles, readDirFiles(dir)); d != "" {
				t.Errorf("files after (-want +got):\n%s", d)
			}
		})
	}
}

// The test must run with the candidate files in place (the real nginx.conf
// includes them by path), and a failed test must not leave them there.
func TestApplyTestSeesCandidates(t *testing.T) {
	dir := t.TempDir()
	f := &fakeNginx{dir: dir, fail: map[string]bool{"test": true}}
	a := &Applier{Dir: dir, Test: []string{"nginx", "-t"}, Reload: []string{"r"}, Runner: f, Log: hclog.NewNullLogger()}
	_, err := a.Apply(context.Background(), ups("upstream-a.conf", "NEW"))
	if !errors.Is(err, ErrTestFailed) {
		t.Fatalf("Apply = %v", err)
	}
	if d := cmp.Diff(map[string]string{"upstream-a.conf": "NEW"}, f.seen); d != "" {
		t.Errorf("files seen by nginx -t (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{}, readDirFiles(dir)); d != "" {
		t.Errorf("files after rollback (-want +got):\n%s", d)
	}
}

// Regression: files written but nginx never reloaded (crash, or a reload
// that failed after a previous write) were then treated as applied forever.
func TestApplyRetriesWhenNotStamped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "upstream-a.conf"), []byte("A1"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &fakeNginx{dir: dir}
	a := &Applier{Dir: dir, Test: []string{"nginx", "-t"}, Reload: []string{"r"}, Runner: f, Log: hclog.NewNullLogger()}
	res, err := a.Apply(context.Background(), ups("upstream-a.conf", "A1"))
	if err != nil || !res.Reloaded {
		t.Fatalf("Apply = %+v, %v; want a reload", res, err)
	}
	f.calls = nil
	if _, err := a.Apply(context.Background(), ups("upstream-a.conf", "A1")); err != nil || f.calls != nil {
		t.Fatalf("second Apply: err %v calls %v, want nothing", err, f.calls)
	}
}

// A real command through ExecRunner: argv only, no shell, output captured.
func TestExecRunner(t *testing.T) {
	out, err := ExecRunner{}.Run(context.Background(), []string{"echo", "a;b", "$HOME"})
	if err != nil || string(out) != "a;b $HOME\n" {
		t.Errorf("Run = %q, %v", out, err)
	}
	if _, err := (ExecRunner{}).Run(context.Background(), []string{"false"}); err == nil {
		t.Errorf("Run(false) = nil error")
	}
}

// A missing output dir (first install) is created, not an error.
func TestApplyCreatesOutputDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slurm-llm")
	f := &fakeNginx{dir: dir}
	a := &Applier{Dir: dir, Test: []string{"nginx", "-t"}, Reload: []string{"r"}, Runner: f, Log: hclog.NewNullLogger()}
	if _, err := a.Apply(context.Background(), ups("upstream-a.conf", "A")); err != nil {
		t.Fatalf("Apply into a missing dir: %v", err)
	}
	if d := cmp.Diff(map[string]string{"upstream-a.conf": "A"}, readDirFiles(dir)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
