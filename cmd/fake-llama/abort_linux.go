//go:build linux

package main

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// dieOfSIGABRT ends the process the way a failed GGML_ABORT does: killed by SIGABRT, so
// a shell or srun reports 134. Go's runtime catches SIGABRT itself (and exits 2), so the
// handler is reset to SIG_DFL with a raw rt_sigaction first; core dumps are turned off.
func dieOfSIGABRT() {
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	var act [4]uint64 // struct sigaction, all zero: SIG_DFL, no flags, empty mask
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGABRT),
		uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	if errno == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGABRT)
		time.Sleep(time.Second)
	}
	os.Exit(134) // the signal did not end us: at least the status matches
}
