package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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
