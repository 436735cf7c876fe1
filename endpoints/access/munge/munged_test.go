package munge

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/endpoints/access/internal/execx"
)

// startMunged starts a private munged (its own key, socket, pid, log and
// seed files in a t.TempDir, in the foreground so its PID is the one
// started) and returns its socket once `munge -n` gets a credential from
// it; the test's end stops it (SIGTERM, then SIGKILL after 10 s) by that
// PID. The test skips when the munge package is not installed.
func startMunged(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"munge", "unmunge"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not found: the munge package is not installed (apt-get install -y munge; dnf install munge)", b)
		}
	}
	munged, err := exec.LookPath("munged")
	if err != nil {
		if munged, err = exec.LookPath("/usr/sbin/munged"); err != nil {
			t.Skip("munged not found: the munge package is not installed (apt-get install -y munge; dnf install munge)")
		}
	}
	dir := t.TempDir()
	// munged wants the socket's directories searchable by all ("Socket is
	// inaccessible: execute permissions for all required"); t.TempDir's are 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "munge.socket")
	logf, err := os.Create(filepath.Join(dir, "munged.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(munged, "--foreground", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge.key"),
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--log-file="+filepath.Join(dir, "munged.log"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start munged: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	log := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if exec.Command("munge", "-n", "--socket="+sock).Run() == nil {
			return sock
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("munged exited: %v\n%s", err, log())
		case <-deadline.C:
			t.Fatalf("munged did not answer on %s in 10 s\n%s", sock, log())
		case <-tick.C:
		}
	}
}

// socketRunner runs argv with --socket=sock added and keeps what it printed.
func socketRunner(sock string, creds *syscall.Credential, printed *[]byte) execx.Runner {
	return func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		if creds != nil { // as another uid: munge proves the uid of its caller
			cmd := exec.CommandContext(ctx, argv[0], slices.Concat(argv[1:], []string{"--socket=" + sock})...)
			cmd.Stdin = bytes.NewReader(stdin)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: creds}
			var errOut strings.Builder
			cmd.Stderr = &errOut
			out, err := cmd.Output()
			return out, []byte(errOut.String()), err
		}
		out, errOut, err := execx.Exec(ctx, slices.Concat(argv, []string{"--socket=" + sock}), stdin)
		if printed != nil {
			*printed = out
		}
		return out, errOut, err
	}
}

// TestRealMunge: the installed munge (0.5.15 on Debian 12) with a private
// munged: a credential made by munge is verified by Verify's unmunge
// (no -N, its default output read), naming the caller's uid, gid, time
// and payload; the same credential again is refused as replayed (by
// munged); a caller whose uid has no name ("??? (N)") is still read.
func TestRealMunge(t *testing.T) {
	sock := startMunged(t)
	ctx := context.Background()

	version, err := Version(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("munge %s", version)

	payload := []byte(`{"aud":"slurm-llm/keys/v1","op":"list"}`)
	before := time.Now().Truncate(time.Second)
	cred, err := Encode(ctx, "", payload, socketRunner(sock, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var printed []byte
	v := Verifier{Run: socketRunner(sock, nil, &printed)}
	got, err := v.Verify(ctx, cred)
	if err != nil {
		t.Fatalf("verify: %v (unmunge printed %q)", err, printed)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if got.UID != uint32(uid) || got.GID != uint32(gid) || got.TTL != 300*time.Second || string(got.Payload) != string(payload) ||
		got.Encoded.Before(before) || got.Encoded.After(after) {
		t.Errorf("verify = %+v, want uid %d gid %d ttl 5m0s payload %s encoded in [%s, %s]", got, uid, gid, payload, before, after)
	}
	// the form read is the default one, not -N's: "UID:  NAME (N)"
	name := "???"
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	if want := fmt.Sprintf("\nUID:             %s (%d)\n", name, uid); !strings.HasPrefix(string(printed), "STATUS:          Success (0)\n") ||
		!strings.Contains(string(printed), want) {
		t.Errorf("unmunge printed %q, want STATUS Success (0) and %q", printed, want)
	}

	if _, err := v.Verify(ctx, cred); !errors.Is(err, ErrReplayed) {
		t.Errorf("verify again: %v, want %v", err, ErrReplayed)
	}

	t.Run("a uid with no name", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run munge as another uid")
		}
		const nobody = 54321
		if _, err := user.LookupId(strconv.Itoa(nobody)); err == nil {
			t.Skipf("uid %d has a name here", nobody)
		}
		cred, err := Encode(ctx, "", payload, socketRunner(sock, &syscall.Credential{Uid: nobody, Gid: nobody}, nil))
		if err != nil {
			t.Fatal(err)
		}
		var printed []byte
		got, err := Verifier{Run: socketRunner(sock, nil, &printed)}.Verify(ctx, cred)
		if err != nil {
			t.Fatalf("verify: %v (unmunge printed %q)", err, printed)
		}
		if got.UID != nobody || got.GID != nobody || !strings.Contains(string(printed), "\nUID:             ??? (54321)\n") {
			t.Errorf("verify = uid %d gid %d, unmunge printed %q; want uid and gid %d, printed as ??? (%d)", got.UID, got.GID, printed, nobody, nobody)
		}
	})
}
