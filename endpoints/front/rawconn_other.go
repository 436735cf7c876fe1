//go:build !linux

package front

import "net"

// rawTCP is c itself: raw system calls are Linux's only (rawconn_linux.go).
func rawTCP(c net.Conn) net.Conn { return c }
