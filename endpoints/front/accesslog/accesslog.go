// Package accesslog writes the front door's access log: one line per
// request (key=value pairs, values a client chose quoted), handed over by
// the request as it ends and written by a goroutine of its own, so that a
// journal or a file that is slow to write delays the lines, never the
// answers. It owns the writer and the line's format; what a request did
// (its Entry) is the front door's to say.
package accesslog

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"slurm-llm/endpoints/access"
	"slurm-llm/endpoints/front/wire"
)

// queueLen is how many access lines may wait for the writer; past it,
// lines are dropped and counted (llm_front_access_log_dropped_total)
// rather than slowing answers.
const queueLen = 4096

// Entry is one request's access log line, formatted by the writer (what a
// client chose is cut and quoted there, off the answer's path); Tier "" is
// written "-".
type Entry struct {
	Start             time.Time
	Method, Path      string
	Status            int
	Tier, Model, Head string
	Held, Duration    time.Duration
	BytesIn, BytesOut int64
	Attempts          int
	Outcome           string
	// Continued, Moved, Restored and Pause are the stream's continuations
	// (written when Continued is not 0).
	Continued, Moved int
	Restored         int
	Pause            time.Duration
	Why              string
	ID               access.Identity
	// Prompt and Completion are the answer's tokens, written when Counted.
	Prompt     int
	Completion int
	Counted    bool
}

// Log writes access lines from a goroutine of its own: a request hands
// its entry over (never blocking) and goes on. One that falls queueLen
// lines behind loses the newest, counted.
type Log struct {
	w       io.Writer
	ch      chan Entry
	dropped func()
	// added and written count entries, for Flush.
	added, written atomic.Int64
	// stop ends the writer (Close), done says it has ended; a request that
	// ends after Close (a stream the shutdown's grace did not wait for)
	// has its line dropped, counted.
	stop, done chan struct{}
	closed     atomic.Bool
}

// New starts the writer of lines to w; dropped is called for each line
// lost.
func New(w io.Writer, dropped func()) *Log {
	a := &Log{w: w, ch: make(chan Entry, queueLen), dropped: dropped, stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// Add queues e's line, or drops it when the queue is full.
func (a *Log) Add(e Entry) {
	a.added.Add(1)
	if a.closed.Load() {
		a.written.Add(1)
		a.dropped()
		return
	}
	select {
	case a.ch <- e:
	default:
		a.written.Add(1)
		a.dropped()
	}
}

// run writes queued lines, as many at a time as are waiting, until Close;
// then what is queued.
func (a *Log) run() {
	defer close(a.done)
	var b bytes.Buffer
	for {
		select {
		case e := <-a.ch:
			a.write(&b, e)
		case <-a.stop:
			for {
				select {
				case e := <-a.ch:
					a.write(&b, e)
				default:
					return
				}
			}
		}
	}
}

// write writes e's line and the lines queued behind it, in one write.
func (a *Log) write(b *bytes.Buffer, e Entry) {
	b.Reset()
	n := int64(1)
	e.format(b)
	for b.Len() < 64<<10 {
		select {
		case e := <-a.ch:
			e.format(b)
			n++
			continue
		default:
		}
		break
	}
	_, _ = a.w.Write(b.Bytes())
	a.written.Add(n)
}

// Flush waits until every line added so far was written (or dropped), at
// most d.
func (a *Log) Flush(d time.Duration) {
	want := a.added.Load()
	deadline := time.Now().Add(d)
	for a.written.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Close writes what is queued and stops the writer; a line added after
// it is dropped (counted).
func (a *Log) Close() {
	if a.closed.CompareAndSwap(false, true) {
		close(a.stop)
	}
	<-a.done
}

// format appends e's line: key=value pairs, values a client chose quoted.
func (e *Entry) format(b *bytes.Buffer) {
	fmt.Fprintf(b, "%s method=%s path=%s status=%d tier=%s model=%s head=%s held_ms=%d duration_ms=%d bytes_in=%d bytes_out=%d attempts=%d outcome=%s",
		e.Start.UTC().Format("2006-01-02T15:04:05.000Z"), wire.Echo(e.Method), strconv.Quote(wire.Echo(e.Path)), e.Status,
		orDash(e.Tier), strconv.Quote(e.Model), e.Head, e.Held.Milliseconds(), e.Duration.Milliseconds(), e.BytesIn,
		e.BytesOut, e.Attempts, e.Outcome)
	b.WriteByte(' ')
	b.WriteString(e.ID.LogFields())
	if e.Counted {
		fmt.Fprintf(b, " prompt_tokens=%d completion_tokens=%d", e.Prompt, e.Completion)
	}
	if e.Continued > 0 {
		fmt.Fprintf(b, " continued=%d moved=%d restored=%d pause_ms=%d", e.Continued, e.Moved, e.Restored, e.Pause.Milliseconds())
	}
	if e.Why != "" {
		fmt.Fprintf(b, " why=%s", strconv.Quote(e.Why))
	}
	b.WriteByte('\n')
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
