//go:build linux && race

package rawconn

import "syscall"

// Under the race detector, reads and writes go through the syscall
// package, whose annotations tell the detector that what one goroutine
// wrote before a write to a socket happens before what another reads
// from its peer; raw calls would hide that and every test whose server
// and client share memory would report a race that is not there.

func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return n, errno(err)
}

func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return n, errno(err)
}

func errno(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return 0
}
