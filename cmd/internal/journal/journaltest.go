package journal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RunAsService runs cmd as systemd runs a service: its standard error a
// stream that JOURNAL_STREAM names (here a file in dir, which stands for
// the journal's socket). It returns what cmd wrote there and its exit
// code (-1 when it could not run). It is for the programs' tests.
func RunAsService(cmd *exec.Cmd, dir string) (string, int, error) {
	f, err := os.Create(filepath.Join(dir, "journal-stream"))
	if err != nil {
		return "", -1, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", -1, fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	cmd.Stderr = f
	cmd.Env = append(cmd.Environ(), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	err = cmd.Run()
	if cmd.ProcessState == nil {
		return "", -1, fmt.Errorf("run %s: %w", cmd.Path, err)
	}
	code := cmd.ProcessState.ExitCode()
	if _, ok := err.(*exec.ExitError); ok {
		err = nil
	}
	b, rerr := os.ReadFile(f.Name())
	if err == nil {
		err = rerr
	}
	return string(b), code, err
}
