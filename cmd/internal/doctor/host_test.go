package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRealHost runs the gathering for real where it is safe on any
// machine: a program that is not installed, systemd's version and a unit
// systemd-analyze verify reads, and directories made here.
func TestRealHost(t *testing.T) {
	h := NewHost(func(uid, gid uint32) (string, string) { return "u" + itoa(uid), "g" + itoa(gid) })
	ctx := context.Background()
	t.Run("missing program", func(t *testing.T) {
		if out := h.Run(ctx, Cmd{Name: "slurm-llm-no-such-program"}); !out.Missing {
			t.Errorf("not missing: %+v", out)
		}
	})
	t.Run("stdin reaches the command", func(t *testing.T) {
		out := h.Run(ctx, Cmd{Name: "cat", Stdin: "MUNGE:abc:\n"})
		if out.Err != nil || out.Stdout != "MUNGE:abc:\n" {
			t.Errorf("cat: %+v", out)
		}
	})
	t.Run("directories", func(t *testing.T) {
		dir := t.TempDir()
		open := filepath.Join(dir, "open")
		if err := os.Mkdir(open, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(open, 0o777); err != nil { // umask would cut Mkdir's
			t.Fatal(err)
		}
		hasFix(t, CheckDir(Dir{Path: open, Role: "endpoint_dir"}, h.Stat(open)), Fail, "chmod 0755 "+open)
		hasFix(t, CheckDir(Dir{Path: dir, Role: "endpoint_dir"}, h.Stat(dir)), OK)
		link := filepath.Join(dir, "link")
		if err := os.Symlink(open, link); err != nil {
			t.Fatal(err)
		}
		hasFix(t, CheckDir(Dir{Path: link, Role: "endpoint_dir"}, h.Stat(link)), Fail, "rm "+link)
		e := h.Stat(dir)
		if want := "u" + itoa(uint32(os.Getuid())); e.Owner != want {
			t.Errorf("owner = %q, want %q", e.Owner, want)
		}
	})
	t.Run("systemd", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			t.Skip("no systemd-analyze here")
		}
		s := GatherSystemd(ctx, h)
		if s.Missing || s.Version < 200 {
			t.Errorf("systemd version = %d (missing %v)", s.Version, s.Missing)
		}
		unit := filepath.Join(t.TempDir(), "doctor-test.service")
		text := "[Unit]\nDescription=doctor test\n[Service]\nExecStart=/bin/true\nProtectSlurmLLMFoo=yes\nPrivateTmp=yes\n"
		if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		unknown, verified := verify(ctx, h, unit)
		if d := cmp.Diff([]string{"ProtectSlurmLLMFoo"}, unknown); d != "" || !verified {
			t.Errorf("verify: verified %v (-want +got):\n%s", verified, d)
		}
	})
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
