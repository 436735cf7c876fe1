package front

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// What an answer says of itself, read on its way to the client: its
// tokens (for llm_front_tokens_total, the usage record and the per-user
// token limits) and why it ended (llm_front_answers_total).

// Finish reasons of llm_front_answers_total besides the heads' own.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishError  = "error" // the head ended the answer with an error event
	finishCut    = "cut"   // it ended before a finish, and was not continued
	finishOther  = "other" // a reason this build does not know: labels stay bounded
)

// finishLabel bounds a head's finish reason to the ones OpenAI's API
// defines (a label's values must not come from the answer unchecked).
func finishLabel(r string) string {
	switch r {
	case finishStop, finishLength, "tool_calls", "content_filter", "function_call", finishError, finishCut:
		return r
	}
	return finishOther
}

// takeUsage records an answer's usage object (OpenAI's prompt_tokens and
// completion_tokens).
func (c *call) takeUsage(raw []byte) {
	var p, n []byte
	_ = eachKey(raw, func(key, val []byte, _ int) bool {
		switch {
		case keyIs(key, "prompt_tokens"):
			p = val
		case keyIs(key, "completion_tokens"):
			n = val
		}
		return true
	})
	pf, _ := numberValue(p)
	nf, _ := numberValue(n)
	c.prompt, c.completion, c.counted = int(pf), int(nf), p != nil || n != nil
}

// sniffHead and sniffTail are how much of a whole (not streamed) answer
// is kept to read its usage and finish reason: llama-server writes JSON
// keys in order (choices first, usage last).
const (
	sniffHead = 512
	sniffTail = 2 << 10
)

// sniffer passes a whole answer's body on unchanged, keeping its first
// and last bytes; at its end it reads the usage (or /completion's
// tokens_evaluated and tokens_predicted) and the finish reason there.
type sniffer struct {
	io.ReadCloser
	c          *call
	buf        *[sniffHead + sniffTail]byte
	head, tail []byte
	done       bool
}

func newSniffer(c *call, body io.ReadCloser) *sniffer {
	b := sniffBuffers.Get().(*[sniffHead + sniffTail]byte)
	return &sniffer{ReadCloser: body, c: c, buf: b, head: b[:0:sniffHead], tail: b[sniffHead:sniffHead]}
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
			s.c.takeUsage(s.tail[i+len(`"usage":`) : end])
		}
	} else if p, ok := numberAfter(s.tail, `"tokens_evaluated":`); ok {
		n, _ := numberAfter(s.tail, `"tokens_predicted":`)
		s.c.prompt, s.c.completion, s.c.counted = p, n, true
	}
	for _, part := range [][]byte{s.head, s.tail} {
		if i := bytes.Index(part, []byte(`"finish_reason":"`)); i >= 0 {
			rest := part[i+len(`"finish_reason":`):]
			if end, err := skipString(rest, 0); err == nil {
				r, _ := stringValue(rest[:end])
				s.c.finish = r
				return
			}
		}
	}
	if bytes.Contains(s.tail, []byte(`"stop_type":"limit"`)) {
		s.c.finish = finishLength
	} else if bytes.Contains(s.tail, []byte(`"stop_type":`)) {
		s.c.finish = finishStop
	}
}

// numberAfter reads the integer after key in b.
func numberAfter(b []byte, key string) (int, bool) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := b[i+len(key):]
	j := skipWS(rest, 0)
	end, err := skipValue(rest, j)
	if err != nil {
		return 0, false
	}
	f, ok := numberValue(rest[j:end])
	return int(f), ok
}

// countAnswer adds a finished call's tokens and finish to the metrics.
func (s *Server) countAnswer(c *call) {
	if c.tier == "" || !c.sent {
		return
	}
	if c.counted {
		s.metrics.tokens.WithLabelValues(c.tier, c.model, "prompt").Add(float64(c.prompt))
		s.metrics.tokens.WithLabelValues(c.tier, c.model, "completion").Add(float64(c.completion))
	}
	switch {
	case c.finish != "":
		s.metrics.answers.WithLabelValues(c.tier, c.model, finishLabel(c.finish)).Inc()
	case c.outcome == OutcomeCut:
		s.metrics.answers.WithLabelValues(c.tier, c.model, finishCut).Inc()
	}
}

// served is how long the call's answer took on its heads.
func (c *call) served(now time.Time) time.Duration {
	if c.dispatched.IsZero() {
		return 0
	}
	return now.Sub(c.start) - c.held
}
