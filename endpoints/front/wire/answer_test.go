package wire

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// completionAnswer is a whole /completion answer as llama-server writes
// it: the counts before generation_settings and the echoed prompt, here
// with pad bytes of both after them.
func completionAnswer(pad int) string {
	prompt := strings.Repeat(`say \"tokens_predicted\": 999 `, pad/30+1)
	return `{"content":"hello there","id_slot":0,"stop":true,"model":"m","tokens_predicted":17,"tokens_evaluated":1234,` +
		`"generation_settings":{"n_predict":64,"temperature":0.8,"samplers":["top_k","min_p"]},` +
		`"prompt":"` + prompt + `","has_new_line":false,"truncated":false,"stop_type":"limit","stopping_word":"",` +
		`"tokens_cached":1250,"timings":{"prompt_n":1234,"predicted_n":17}}`
}

// TestSnifferCountsWholeCompletions: a whole /completion answer is counted
// wherever its tokens_evaluated and tokens_predicted are (issue 37: the
// sniffer kept the last 2 KiB, and an answer with more than that after its
// counts was recorded with no tokens: usage and tokens_per_minute bypassed),
// read in pieces of every size, with the prompt's escaped look-alike never
// taken.
func TestSnifferCountsWholeCompletions(t *testing.T) {
	for _, pad := range []int{0, 3000, 100000} {
		body := completionAnswer(pad)
		for _, piece := range []int{1, 7, 63, 64, 65, 4096, len(body)} {
			t.Run(fmt.Sprintf("pad %d, reads of %d", pad, piece), func(t *testing.T) {
				var c Tally
				s := Sniff(io.NopCloser(&pieces{s: body, n: piece}), &c)
				if _, err := io.Copy(io.Discard, onlyReader{s}); err != nil {
					t.Fatal(err)
				}
				s.Close()
				if !c.Counted || c.Prompt != 1234 || c.Completion != 17 {
					t.Errorf("counted %v, prompt %d, completion %d; want 1234 and 17", c.Counted, c.Prompt, c.Completion)
				}
				if c.Finish != FinishLength {
					t.Errorf("finish %q, want %q (stop_type limit)", c.Finish, FinishLength)
				}
			})
		}
	}
}

// TestCountScanEverySplit cuts the counts at every byte.
func TestCountScanEverySplit(t *testing.T) {
	body := completionAnswer(0)
	for cut := 0; cut <= len(body); cut++ {
		var c countScan
		c.feed([]byte(body[:cut]))
		c.feed([]byte(body[cut:]))
		if !c.seen[0] || !c.seen[1] || c.val != [2]int{1234, 17} {
			t.Fatalf("cut at %d: seen %v, values %v", cut, c.seen, c.val)
		}
	}
}

// pieces reads s n bytes at a time.
type pieces struct {
	s string
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.s == "" {
		return 0, io.EOF
	}
	n := copy(b, p.s[:min(p.n, len(p.s))])
	p.s = p.s[n:]
	return n, nil
}

// onlyReader hides io.Copy's WriterTo/ReaderFrom shortcuts.
type onlyReader struct{ io.Reader }
