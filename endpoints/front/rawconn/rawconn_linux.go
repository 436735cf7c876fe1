package rawconn

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// rawConn is a TCP connection whose reads and writes are raw system calls
// on its non-blocking socket, waiting for readiness through Go's network
// poller as every net.Conn does (deadlines included: syscall.RawConn).
//
// Why: a read or write on a non-blocking socket never blocks, but Go's
// net package makes it as a blocking system call (entersyscall). On a VM
// where a system call is slow (a loopback write that wakes the head takes
// tens of µs here), the runtime's sysmon sees the processor in a system
// call on two of its ticks, takes it away and wakes another thread to
// run what waits; with one processor (max_procs = 1) there is nothing to
// run, so every request paid for thread wakeups that did nothing. Raw
// calls do not enter the scheduler: in BenchmarkE2EFrontLatency the front
// door's context switches per request fell from 5.8 to 2.5 (nginx 2.3)
// and its CPU from about 218 to 150 µs (README Benchmarks). gVisor's
// netstack writes to its non-blocking descriptors the same way.
//
// The calls themselves are sysRead and sysWrite (rawsys_linux.go; with
// the race detector, the syscall package's, rawsys_race_linux.go).
//
// Each direction keeps its call's state in the connection (no closure
// allocated per call), under its own lock: net.Conn allows a Read and a
// Write at once, and two Reads (or Writes) at once would share the fields
// before the poller's own lock orders them.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wdone   int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

// rawTCP wraps c when it is a TCP connection; any other is returned as it
// is.
func rawTCP(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn, r.writeFn = r.read, r.write
	return r
}

// read is one read(2) for the poller: false asks it to wait until the
// socket is readable (EAGAIN) and call again.
func (c *rawConn) read(fd uintptr) bool {
	for {
		n, e := sysRead(fd, c.rbuf)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rn, c.rerrno = n, e
		return true
	}
}

// write writes all of wbuf from wdone on, asking the poller to wait
// whenever the socket's buffer is full.
func (c *rawConn) write(fd uintptr) bool {
	for c.wdone < len(c.wbuf) {
		n, e := sysWrite(fd, c.wbuf[c.wdone:])
		switch e {
		case 0:
			c.wdone += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werrno = e
			return true
		}
	}
	return true
}

// Read reads as net.Conn's Read: io.EOF once the peer has closed, the
// poller's error for a deadline or a closed connection (os.ErrDeadlineExceeded,
// net.ErrClosed), an *net.OpError for the system call's.
func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rbuf, c.rn, c.rerrno = b, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerrno
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, or says how much it wrote before it failed.
func (c *rawConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf, c.wdone, c.werrno = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wdone, c.werrno
	c.wbuf = nil
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError names the operation and both ends, as the net package's errors
// do; the poller's own errors come wrapped by syscall.RawConn as "raw-read"
// or "raw-write", and are unwrapped first so that callers see "read" or
// "write" and errors.Is still finds os.ErrDeadlineExceeded or net.ErrClosed.
func (c *rawConn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
