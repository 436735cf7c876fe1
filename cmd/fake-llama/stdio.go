package main

import (
	"bufio"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// stdioBufSize is glibc's stdout buffer for a pipe or file: st_blksize, 4096 on Linux.
const stdioBufSize = 4096

// stdioWriter is C's stdout as real rpc-server's printf sees it: line-buffered
// on a terminal, otherwise fully buffered, so through a pipe or into a log file
// nothing shows until the buffer fills, fflush(stdout) or exit(). A process
// killed by a signal loses what is still buffered, as a C program does.
type stdioWriter interface {
	io.Writer
	// Flush is fflush(stdout).
	Flush() error
}

// lineWriter is stdout on a terminal: every printf here writes whole lines,
// so writing through at once is line buffering.
type lineWriter struct{ io.Writer }

// Flush does nothing: nothing is held.
func (lineWriter) Flush() error { return nil }

// newStdio wraps f like C stdio wraps fd 1: line-buffered when f is a
// terminal (TCGETS succeeds, isatty's test), else a 4096-byte buffer.
func newStdio(f *os.File) stdioWriter {
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
		return lineWriter{f}
	}
	return bufio.NewWriterSize(f, stdioBufSize)
}
