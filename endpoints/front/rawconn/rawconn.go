// Package rawconn makes the reads and writes of the front door's TCP
// connections, its clients' and its heads', raw system calls on their
// non-blocking sockets (rawconn_linux.go says why; elsewhere the
// connections are left as they are). It owns how bytes cross a socket:
// what they say, and when a connection is opened or closed, are the
// front door's.
package rawconn

import (
	"context"
	"net"
)

// Listener is ln with its TCP connections' reads and writes made as raw
// system calls: the front door's listener.
func Listener(ln net.Listener) net.Listener { return rawListener{ln} }

// rawListener hands out rawTCP connections.
type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return rawTCP(c), nil
}

// Dialer dials with d and wraps what it dials (the heads' side), for an
// http.Transport's DialContext.
func Dialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawTCP(c), nil
	}
}
