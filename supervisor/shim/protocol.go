// Package shim holds one process of a tier through Slurm's stop signals.
//
// Every process the supervisor starts with srun runs as
//
//	srun … -- llm-supervisor shim --token T [--hold D] [--grace D] -- rpc-server …
//
// At preemption, cancellation and requeue Slurm sends SIGCONT+SIGTERM to every
// process of every step at once (see FACTS.md). The shim starts its child with
// SIGTERM blocked, so Slurm's SIGTERM reaches only the shim; the shim reports
// it to the supervisor at once with a marker line on its stderr, and keeps
// the child running until the supervisor writes "stop" to the step's stdin
// or the hold deadline passes. Then it stops the child: the stop signal
// (SIGINT by default, since SIGTERM is blocked in the child) to the child's
// process group, the grace, then SIGKILL. It exits with the child's status.
//
// This file is the protocol, shared by the shim (writer of markers, reader of
// commands) and the supervisor (reader of markers, writer of commands).
package shim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MarkerPrefix starts every marker line the shim writes to its stderr.
// Only lines that start with it and carry the run's token are markers.
const MarkerPrefix = "slurm-llm-shim: "

// EventKind is what a marker reports. The zero value is not a valid kind.
type EventKind string

// The events a shim reports, in the order they can happen.
const (
	// EventStarted: the child runs; ChildPID is set.
	EventStarted EventKind = "started"
	// EventSignal: the shim received a stop signal from Slurm (or srun);
	// Signal names it, Count says how many so far. The child is held.
	EventSignal EventKind = "signal"
	// EventStdinClosed: the command channel closed; nobody can send "stop"
	// any more, so a held child is stopped at once.
	EventStdinClosed EventKind = "stdin-closed"
	// EventStopping: the shim sent Signal to the child's process group
	// because of Reason.
	EventStopping EventKind = "stopping"
	// EventPortBusy: before starting the child, its port (Port) was found
	// held by another process (Holder, its pid; 0 when not visible): the
	// child is not started (an EventExited with ReasonPortBusy follows).
	EventPortBusy EventKind = "port-busy"
	// EventListening: the child itself holds a socket listening on Port,
	// so whatever answers there is this child.
	EventListening EventKind = "listening"
	// EventExited: the child ended; Status is the shim's exit status,
	// ExitCode or Signal say how the child ended, Reason why (if the shim
	// stopped it) or "exited" (if it ended on its own).
	EventExited EventKind = "exited"
)

// Reasons a shim stops its child (EventStopping.Reason, EventExited.Reason).
const (
	ReasonStop        = "stop"         // "stop" command
	ReasonStopNow     = "stop-now"     // "stop-now" command
	ReasonHold        = "hold-expired" // no command within the hold after a signal
	ReasonGrace       = "grace-expired"
	ReasonStdinClosed = "stdin-closed"
	ReasonExited      = "exited"        // the child ended on its own
	ReasonStartFailed = "start-failed"  // the child never ran
	ReasonPortBusy    = "port-busy"     // the child's port was held by another process
	ReasonLease       = "lease-expired" // the supervisor did not renew the lease in time
)

// Event is one parsed marker. Fields a kind does not use are zero.
type Event struct {
	Kind EventKind
	// Time is when the shim wrote the marker (its clock, UTC).
	Time time.Time
	// ShimPID and ChildPID are process IDs on the step's node.
	ShimPID  int
	ChildPID int
	// Signal is the signal received (EventSignal), sent (EventStopping) or
	// that ended the child (EventExited); "" if none.
	Signal string
	// Count is how many stop signals the shim has received (EventSignal).
	Count int
	// Reason is why the shim stops or stopped its child.
	Reason string
	// ExitCode is the child's exit code when it exited normally, else -1
	// (EventExited only).
	ExitCode int
	// Status is the shim's own exit status: ExitCode, or 128+signal
	// (EventExited only).
	Status int
	// Port is the child's port (EventPortBusy, EventListening); Holder the
	// pid that held it (EventPortBusy; 0 when not visible).
	Port   int
	Holder int
}

// Commands the supervisor writes to the step's stdin, one per line.
const (
	CommandStop    = "stop"
	CommandStopNow = "stop-now"
	// CommandLease renews the child's lease to an absolute time on the
	// node's clock: "lease 2026-11-23T12:00:20.5Z" lets it run until then
	// unless renewed again (Config.LeaseUntil).
	CommandLease = "lease"
)

// LeaseCommand is the line that renews a shim's lease on its child until
// the time until.
func LeaseCommand(until time.Time) []byte {
	return []byte(CommandLease + " " + until.UTC().Format(time.RFC3339Nano) + "\n")
}

// StopCommand is the line that asks a shim to stop its child: gracefully
// (stop signal, grace, SIGKILL) or, with now, with SIGKILL at once.
func StopCommand(now bool) []byte {
	if now {
		return []byte(CommandStopNow + "\n")
	}
	return []byte(CommandStop + "\n")
}

// NewToken returns a random token for one run's markers: 32 hex digits.
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new shim token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// validToken reports whether a token can travel in a marker: non-empty,
// no spaces, no '=' and nothing unprintable.
func validToken(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for _, r := range t {
		if r <= ' ' || r == '=' || r > '~' {
			return false
		}
	}
	return true
}

// FormatMarker renders ev as a marker line (with its newline) for token.
func FormatMarker(token string, ev Event) string {
	var b strings.Builder
	b.WriteString(MarkerPrefix)
	fmt.Fprintf(&b, "token=%s event=%s ts=%s pid=%d", token, ev.Kind,
		ev.Time.UTC().Format(time.RFC3339Nano), ev.ShimPID)
	if ev.ChildPID != 0 {
		fmt.Fprintf(&b, " child=%d", ev.ChildPID)
	}
	if ev.Signal != "" {
		fmt.Fprintf(&b, " signal=%s", ev.Signal)
	}
	if ev.Count != 0 {
		fmt.Fprintf(&b, " count=%d", ev.Count)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, " reason=%s", ev.Reason)
	}
	if ev.Kind == EventExited {
		fmt.Fprintf(&b, " code=%d status=%d", ev.ExitCode, ev.Status)
	}
	if ev.Port != 0 {
		fmt.Fprintf(&b, " port=%d", ev.Port)
	}
	if ev.Kind == EventPortBusy {
		fmt.Fprintf(&b, " holder=%d", ev.Holder)
	}
	b.WriteByte('\n')
	return b.String()
}

// ParseMarker reads one line of a step's stderr. It returns the event and
// true only if the line is a well-formed marker carrying token; any other
// line (the child's own output, srun's messages, another run's marker) is
// not a marker. A trailing "\n" or "\r\n" is allowed.
func ParseMarker(line string, token string) (Event, bool) {
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	rest, ok := strings.CutPrefix(line, MarkerPrefix)
	if !ok || !validToken(token) {
		return Event{}, false
	}
	fields := strings.Split(rest, " ")
	if len(fields) < 4 || fields[0] != "token="+token {
		return Event{}, false
	}
	ev := Event{ExitCode: -1}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok || val == "" || seen[key] || !setField(&ev, key, val) {
			return Event{}, false
		}
		seen[key] = true
	}
	if !seen["event"] || !seen["ts"] || !seen["pid"] || !complete(ev, seen) {
		return Event{}, false
	}
	return ev, true
}

// setField stores one key=value of a marker in ev; false if the key is
// unknown or the value malformed.
func setField(ev *Event, key, val string) bool {
	var err error
	switch key {
	case "event":
		ev.Kind = EventKind(val)
		return knownKind(ev.Kind)
	case "ts":
		ev.Time, err = time.Parse(time.RFC3339Nano, val)
	case "pid":
		ev.ShimPID, err = positive(val)
	case "child":
		ev.ChildPID, err = positive(val)
	case "signal":
		ev.Signal = val
		return strings.HasPrefix(val, "SIG")
	case "count":
		ev.Count, err = positive(val)
	case "reason":
		ev.Reason = val
	case "code":
		ev.ExitCode, err = strconv.Atoi(val)
	case "status":
		ev.Status, err = strconv.Atoi(val)
	case "port":
		ev.Port, err = positive(val)
	case "holder":
		ev.Holder, err = strconv.Atoi(val)
		if err == nil && ev.Holder < 0 {
			err = fmt.Errorf("negative holder %d", ev.Holder)
		}
	default:
		return false
	}
	return err == nil
}

// complete checks that a kind's required fields are present.
func complete(ev Event, seen map[string]bool) bool {
	switch ev.Kind {
	case EventStarted:
		return seen["child"]
	case EventSignal:
		return seen["signal"] && seen["count"]
	case EventStopping:
		return seen["signal"] && seen["reason"]
	case EventExited:
		return seen["code"] && seen["status"] && seen["reason"]
	case EventPortBusy:
		return seen["port"] && seen["holder"]
	case EventListening:
		return seen["port"]
	}
	return true
}

func knownKind(k EventKind) bool {
	switch k {
	case EventStarted, EventSignal, EventStdinClosed, EventStopping, EventExited, EventPortBusy, EventListening:
		return true
	}
	return false
}

func positive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n <= 0 {
		err = fmt.Errorf("not positive: %d", n)
	}
	return n, err
}
