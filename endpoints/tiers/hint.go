package tiers

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Hints (endpoints.SendHint) wake llm-upstreams watch for a pass: see
// endpoints/hint.go for what a hint is and is not.

// MaxHintSize is the largest datagram read; longer ones are truncated
// (and still count as one hint).
const MaxHintSize = 512

// Hints listens for hint datagrams and offers them to Watch on C, at
// most one waiting: a burst of hints is one wake-up, and Watch coalesces
// wake-ups like file events (a pass at most every coalesce interval), so
// a flood cannot run passes back to back. Build it with ListenHints; Close
// stops it.
type Hints struct {
	conn net.PacketConn
	c    chan struct{}
	wg   sync.WaitGroup
}

// ListenHints listens on addr (UDP, "10.77.0.1:9466"; port 0 picks one).
func ListenHints(addr string) (*Hints, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("hint listen %s: %w", addr, err)
	}
	h := &Hints{conn: conn, c: make(chan struct{}, 1)}
	h.wg.Add(1)
	go h.read()
	return h, nil
}

// read receives datagrams until the connection is closed.
func (h *Hints) read() {
	defer h.wg.Done()
	buf := make([]byte, MaxHintSize)
	for {
		if _, _, err := h.conn.ReadFrom(buf); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP-induced errors on some systems: keep listening
		}
		select {
		case h.c <- struct{}{}:
		default: // a wake-up is already waiting
		}
	}
}

// C delivers a value after one or more hints; nil (never ready) on a nil
// Hints, so that Watch without a listener reads from it harmlessly.
func (h *Hints) C() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.c
}

// Addr is the address listened on.
func (h *Hints) Addr() net.Addr { return h.conn.LocalAddr() }

// Close stops listening and waits for the reader to end.
func (h *Hints) Close() error {
	err := h.conn.Close()
	h.wg.Wait()
	return err
}
