//go:build linux && !race

package rawconn

import (
	"syscall"
	"unsafe"
)

// sysRead is read(2) as a raw system call: it does not tell the scheduler
// (rawconn_linux.go says why). b is not empty.
func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// sysWrite is write(2) as a raw system call. b is not empty.
func sysWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}
