package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	t.Run("nftables: README's rules in a network namespace of the test's", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil || os.Geteuid() != 0 {
			t.Skip("needs nft and root (unshare -n)")
		}
		// nft -i commits each line; nft -f would list before its batch
		// is committed. The namespace ends with the command.
		script := `add table inet slurm_llm_rpc
add chain inet slurm_llm_rpc output { type filter hook output priority 0; policy accept; }
add rule inet slurm_llm_rpc output ip daddr 10.77.0.0/16 tcp dport 50052 meta skuid != "nobody" counter reject with tcp reset
add chain inet slurm_llm_rpc input { type filter hook input priority 0; policy accept; }
add rule inet slurm_llm_rpc input tcp dport { 50052, 50060-50070 } ip saddr != 10.77.0.0/16 counter drop
list ruleset
`
		out := h.Run(ctx, Cmd{Name: "unshare", Args: []string{"-n", "nft", "-i"}, Stdin: script})
		if out.Err != nil {
			t.Skipf("no network namespace here: %v %s", out.Err, out.Stderr)
		}
		rpc := []Port{{Port: 50052, Proto: "tcp", What: "rpc-server"}, {Port: 50065, Proto: "tcp", What: "rpc-server"}}
		r := CheckRPCExposure(Firewall{Nft: out.Stdout}, rpc[:1])
		hasFix(t, r, OK)
		if !strings.Contains(r.What, "50052 from 10.77.0.0/16") || !strings.Contains(r.What, "only uid 65534") {
			t.Errorf("what = %q\nruleset:\n%s", r.What, out.Stdout)
		}
		// 50065 is dropped from outside but any user may connect to it.
		hasFix(t, CheckRPCExposure(Firewall{Nft: out.Stdout}, rpc[1:]), Warn, "skuid")
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
