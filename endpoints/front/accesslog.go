package front

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"slurm-llm/endpoints/access"
)

// accessQueue is how many access lines may wait for the writer; past it,
// lines are dropped and counted (llm_front_access_log_dropped_total)
// rather than slowing answers.
const accessQueue = 4096

// accessEntry is one request's access log line, formatted by the writer.
type accessEntry struct {
	start             time.Time
	method, path      string
	status            int
	tier, model, head string
	held, duration    time.Duration
	bytesIn, bytesOut int64
	attempts          int
	outcome           string
	continued, moved  int
	restored          int
	pause             time.Duration
	why               string
	id                access.Identity
	prompt            int
	completion        int
	counted           bool
}

// accessLog writes access lines from a goroutine of its own: a request
// hands its entry over (never blocking) and goes on. A journal or a file
// that is slow to write delays the lines, not the answers; one that falls
// accessQueue lines behind loses the newest, counted.
type accessLog struct {
	w       io.Writer
	ch      chan accessEntry
	dropped func()
	// added and written count entries, for flush.
	added, written atomic.Int64
	// stop ends the writer (close), done says it has ended; a request that
	// ends after close (a stream the shutdown's grace did not wait for)
	// has its line dropped, counted.
	stop, done chan struct{}
	closed     atomic.Bool
}

// newAccessLog starts the writer of lines to w; dropped is called for each
// line lost.
func newAccessLog(w io.Writer, dropped func()) *accessLog {
	a := &accessLog{w: w, ch: make(chan accessEntry, accessQueue), dropped: dropped, stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// add queues e's line, or drops it when the queue is full.
func (a *accessLog) add(e accessEntry) {
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

// run writes queued lines, as many at a time as are waiting, until close;
// then what is queued.
func (a *accessLog) run() {
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
func (a *accessLog) write(b *bytes.Buffer, e accessEntry) {
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

// flush waits until every line added so far was written (or dropped), at
// most d.
func (a *accessLog) flush(d time.Duration) {
	want := a.added.Load()
	deadline := time.Now().Add(d)
	for a.written.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// close writes what is queued and stops the writer; a line added after
// it is dropped (counted).
func (a *accessLog) close() {
	if a.closed.CompareAndSwap(false, true) {
		close(a.stop)
	}
	<-a.done
}

// format appends e's line: key=value pairs, values a client chose quoted.
func (e *accessEntry) format(b *bytes.Buffer) {
	fmt.Fprintf(b, "%s method=%s path=%s status=%d tier=%s model=%s head=%s held_ms=%d duration_ms=%d bytes_in=%d bytes_out=%d attempts=%d outcome=%s",
		e.start.UTC().Format("2006-01-02T15:04:05.000Z"), echo(e.method), strconv.Quote(echo(e.path)), e.status,
		orDash(e.tier), strconv.Quote(e.model), e.head, e.held.Milliseconds(), e.duration.Milliseconds(), e.bytesIn,
		e.bytesOut, e.attempts, e.outcome)
	b.WriteByte(' ')
	b.WriteString(e.id.LogFields())
	if e.counted {
		fmt.Fprintf(b, " prompt_tokens=%d completion_tokens=%d", e.prompt, e.completion)
	}
	if e.continued > 0 {
		fmt.Fprintf(b, " continued=%d moved=%d restored=%d pause_ms=%d", e.continued, e.moved, e.restored, e.pause.Milliseconds())
	}
	if e.why != "" {
		fmt.Fprintf(b, " why=%s", strconv.Quote(e.why))
	}
	b.WriteByte('\n')
}
