package wire

import (
	"bytes"
	"io"
	"sync"
)

// Finish reasons an answer's bytes give besides a chat chunk's own: a
// /completion's stop_type read as OpenAI's, and a head's error event.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishError  = "error" // the head ended the answer with an error event
)

// Tally is what an answer says of itself, read on its way to the client:
// its tokens (usage, or a /completion's counts; a continued answer's as
// one answer) and why it ended. The zero value is an answer that said
// nothing yet.
type Tally struct {
	// Prompt and Completion are the answer's tokens; Counted is set when
	// the head reported them.
	Prompt, Completion int
	Counted            bool
	// Finish is the answer's finish reason (FinishError for a head's
	// error event); "" until one is read.
	Finish string
}

// TakeUsage records an answer's usage object (OpenAI's prompt_tokens and
// completion_tokens).
func (t *Tally) TakeUsage(raw []byte) {
	var p, n []byte
	_ = EachKey(raw, func(key, val []byte, _ int) bool {
		switch {
		case KeyIs(key, "prompt_tokens"):
			p = val
		case KeyIs(key, "completion_tokens"):
			n = val
		}
		return true
	})
	pf, _ := NumberValue(p)
	nf, _ := NumberValue(n)
	t.Prompt, t.Completion, t.Counted = int(pf), int(nf), p != nil || n != nil
}

// sniffHead and sniffTail are how much of a whole (not streamed) answer
// is kept to read its usage and finish reason: llama-server writes JSON
// keys in order (choices first, usage last).
const (
	sniffHead = 512
	sniffTail = 2 << 10
)

// sniffer passes a whole answer's body on unchanged, keeping its first
// and last bytes; at its end it reads the usage and the finish reason
// there. /completion's tokens_evaluated and tokens_predicted come before
// its generation_settings and the echoed prompt, any length from the end,
// so they are looked for in every byte as it passes (counts).
type sniffer struct {
	io.ReadCloser
	t          *Tally
	buf        *[sniffHead + sniffTail]byte
	head, tail []byte
	counts     countScan
	done       bool
}

// countKeys are the keys of a whole /completion answer whose numbers are
// its usage: prompt (evaluated), then completion (predicted).
var countKeys = [2][]byte{[]byte(`"tokens_evaluated":`), []byte(`"tokens_predicted":`)}

// countCarry is how many bytes of one read are kept for the next: a key
// and its number (at most 19 + 1 + 20 bytes) may be cut between reads.
const countCarry = 64

// countScan finds the numbers of countKeys anywhere in a body read in
// pieces. An unescaped `"tokens_predicted":` can only be a key (in a
// string, such as the echoed prompt, its quotes are escaped), and no
// nested object of llama-server's answer has these keys.
type countScan struct {
	carry  [countCarry]byte
	nCarry int
	val    [2]int
	seen   [2]bool
}

// feed scans b: the keys wholly inside it, then those across the cut
// between the last read and this one.
func (c *countScan) feed(b []byte) {
	if len(b) == 0 {
		return
	}
	c.scan(b, 0)
	if c.nCarry > 0 {
		var join [2 * countCarry]byte
		n := copy(join[:], c.carry[:c.nCarry])
		n += copy(join[n:], b[:min(len(b), countCarry)])
		c.scan(join[:n], c.nCarry)
	}
	if len(b) >= countCarry {
		c.nCarry = copy(c.carry[:], b[len(b)-countCarry:])
	} else {
		keep := min(c.nCarry, countCarry-len(b))
		copy(c.carry[:], c.carry[c.nCarry-keep:c.nCarry])
		c.nCarry = keep + copy(c.carry[keep:], b)
	}
}

// scan takes each key whose number is ended inside w by the byte after it
// (a number at w's very end may go on in the next read), unless that byte
// lies before from (an earlier scan saw it).
func (c *countScan) scan(w []byte, from int) {
	for k, key := range countKeys {
		for off := 0; ; {
			i := bytes.Index(w[off:], key)
			if i < 0 {
				break
			}
			i += off
			off = i + len(key)
			j := skipWS(w, off)
			end, err := skipValue(w, j)
			if err != nil || end >= len(w) || end < from {
				continue
			}
			if f, ok := NumberValue(w[j:end]); ok {
				c.val[k], c.seen[k] = int(f), true
			}
		}
	}
}

// Sniff passes a whole (not streamed) answer's body on unchanged and, at
// its end, records in t what the answer says of its tokens and finish.
// Closing it gives back the bytes it kept.
func Sniff(body io.ReadCloser, t *Tally) io.ReadCloser {
	b := sniffBuffers.Get().(*[sniffHead + sniffTail]byte)
	return &sniffer{ReadCloser: body, t: t, buf: b, head: b[:0:sniffHead], tail: b[sniffHead:sniffHead]}
}

// sniffBuffers lend sniffers the bytes they keep.
var sniffBuffers = sync.Pool{New: func() any { return new([sniffHead + sniffTail]byte) }}

// Close closes the body and gives the kept bytes back.
func (s *sniffer) Close() error {
	err := s.ReadCloser.Close()
	if s.buf != nil {
		sniffBuffers.Put(s.buf)
		s.buf, s.head, s.tail = nil, nil, nil
	}
	return err
}

func (s *sniffer) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	b := p[:n]
	if room := sniffHead - len(s.head); room > 0 {
		s.head = append(s.head, b[:min(room, len(b))]...)
	}
	s.counts.feed(b)
	if len(b) >= sniffTail {
		s.tail = append(s.tail[:0], b[len(b)-sniffTail:]...)
	} else {
		if over := len(s.tail) + len(b) - sniffTail; over > 0 {
			s.tail = append(s.tail[:0], s.tail[over:]...)
		}
		s.tail = append(s.tail, b...)
	}
	if err == io.EOF && !s.done {
		s.done = true
		s.read()
	}
	return n, err
}

// read takes what the kept bytes say. An unescaped `"usage":{` can only be
// a key (in a string its quotes are escaped).
func (s *sniffer) read() {
	if i := bytes.LastIndex(s.tail, []byte(`"usage":{`)); i >= 0 {
		if end, err := skipValue(s.tail, i+len(`"usage":`)); err == nil {
			s.t.TakeUsage(s.tail[i+len(`"usage":`) : end])
		}
	} else if s.counts.seen[0] {
		s.t.Prompt, s.t.Completion, s.t.Counted = s.counts.val[0], s.counts.val[1], true
	}
	for _, part := range [][]byte{s.head, s.tail} {
		if i := bytes.Index(part, []byte(`"finish_reason":"`)); i >= 0 {
			rest := part[i+len(`"finish_reason":`):]
			if end, err := skipString(rest, 0); err == nil {
				r, _ := StringValue(rest[:end])
				s.t.Finish = r
				return
			}
		}
	}
	if bytes.Contains(s.tail, []byte(`"stop_type":"limit"`)) {
		s.t.Finish = FinishLength
	} else if bytes.Contains(s.tail, []byte(`"stop_type":`)) {
		s.t.Finish = FinishStop
	}
}
