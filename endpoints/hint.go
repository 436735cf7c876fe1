package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
)

// A hint is one UDP datagram that tells llm-upstreams watch "look now":
// the supervisor sends one after each write of its endpoint file, because
// on the shared file system (NFS) the controller's inotify never sees
// writes made by the compute nodes, and a pass would otherwise wait for
// the sweep. A hint carries no authority: it is not authenticated and its
// content is never trusted or parsed for routing, it only triggers a
// (coalesced) pass; the endpoint file stays the only source of truth. Its
// content, by convention "<tier> <job id>\n" (HintMessage), is for people
// reading a packet capture.

// HintMessage is the datagram SendHint sends for tier and job.
func HintMessage(tier, jobID string) []byte { return []byte(tier + " " + jobID + "\n") }

// SendHint sends one hint datagram for tier and job to addr ("host:port",
// the controller's hint_listen; several separated by commas, for the
// watcher's and the front door's listeners) and returns once it is sent.
// UDP gives no answer: an error means it could not be sent (no route, a
// bad address), never that nobody listened. Callers treat errors as
// harmless: the sweep routes the change anyway, later.
func SendHint(ctx context.Context, addr, tier, jobID string) error {
	var errs []error
	for _, a := range strings.Split(addr, ",") {
		if err := sendHint(ctx, strings.TrimSpace(a), tier, jobID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sendHint sends the datagram to one address.
func sendHint(ctx context.Context, addr, tier, jobID string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return fmt.Errorf("send hint to %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write(HintMessage(tier, jobID)); err != nil {
		return fmt.Errorf("send hint to %s: %w", addr, err)
	}
	return nil
}

// The listening half: the controller's.

// MaxHintSize is the largest datagram read; longer ones are truncated
// (and still count as one hint).
const MaxHintSize = 512

// Hints listens for hint datagrams and offers them to llm-upstreams watch (tiers.Watch) on C, at
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
