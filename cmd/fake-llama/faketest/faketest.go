// Package faketest is what tests that run the fake llama.cpp (and other
// real processes) share: building the fake once per test binary, a buffer
// their output can be written to from several goroutines, and free
// loopback ports. Only tests import it.
package faketest

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Build builds cmd/fake-llama as dir/fake-llama and returns its path. The
// fake is built with -race when the test binary is, so a data race in the
// fake shows in its output while the tests run. It is meant for TestMain,
// which owns dir and removes it after m.Run.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "fake-llama")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "slurm-llm/cmd/fake-llama")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build fake-llama: %w\n%s", err, out)
	}
	return bin, nil
}

// Buffer is a bytes.Buffer that a process's output (or a logger) and the
// test can share. The zero value is an empty buffer.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
