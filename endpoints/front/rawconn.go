package front

import (
	"context"
	"net"
)

// Listener is ln with its TCP connections' reads and writes made as raw
// system calls (rawconn_linux.go): the front door's listener.
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

// rawDialer dials with d and wraps what it dials (the heads' side).
func rawDialer(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawTCP(c), nil
	}
}
