//go:build !linux

package rawconn

import "net"

// rawTCP is c itself: raw system calls are Linux's only (rawconn_linux.go).
func rawTCP(c net.Conn) net.Conn { return c }
