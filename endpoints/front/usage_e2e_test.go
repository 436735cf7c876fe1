//go:build e2e

package front_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/cmd/fake-llama/faketest"
)

// Usage exactness (issue 28, "Measured"): after a mixed load by two users
// through the real front door, each user's tokens in `llm-upstreams usage`
// are the sum of what the heads reported for that user's requests.
//
// What the heads reported is read from the heads' own answers, before the
// front door touches them: each fake head is published behind a
// recording proxy (headLog) that reads every answer on its way to the
// front door and adds up the usage in it (a chat answer's or stream's
// "usage", a /completion's tokens_evaluated and tokens_predicted) by the
// client's X-Test-User header, which the front door passes on (to a
// continuation's head too). A stream cut by its head's death reported
// nothing; its continuation's head reports its own prompt (which holds the
// K tokens sent before the cut as the assistant's prefill) and
// completion. The front door counts a continued answer once, as the
// client's request: those K tokens as completion, not prompt (README,
// "Streams continue on another head"), so per user the database's prompt
// is the heads' less the sum of K, its completion the heads' plus it, and
// its total the heads' exactly. K is read by the client: the tokens before
// the continuation's comment line (the last one's, for an answer cut
// twice: its last head's prompt holds everything sent before).
//
// A streamed answer no head reported usage for (cut and not continued)
// counts, as the front door counts it, the completion tokens its client
// got, which the client reads to the answer's end. A client that leaves
// mid-stream cannot see how many tokens the front door passed on before
// it noticed: a third user, carol, sends only such a stream, and her
// completion tokens must lie between what she read and what the head
// sent.

// headLog is a recording reverse proxy in front of one head.
type headLog struct {
	srv  *httptest.Server
	mu   sync.Mutex
	sums map[string]*reported // by user
	// silent are finished answers (200, whole or to their end) that
	// reported no usage: the front door did not ask a chat stream's head
	// for it.
	silent []string
	open   map[string]string // request id → user, answers under way
	// reportedIDs are the requests some answer of this head reported
	// usage for; sent counts the tokens this head sent per request.
	reportedIDs map[string]bool
	sent        map[string]int
}

// reported is what one head reported for one user.
type reported struct{ prompt, completion, answers int }

func newHeadLog(t *testing.T, headPort int) *headLog {
	t.Helper()
	target, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", headPort))
	l := &headLog{sums: map[string]*reported{}, open: map[string]string{}, reportedIDs: map[string]bool{}, sent: map[string]int{}}
	rp := &httputil.ReverseProxy{
		// The body is read whole first (as the front door does), not
		// streamed to the head: Go's server discards what is left of a
		// request's body once the answer's header is written, and a
		// transport still sending it then closed its connection to the
		// head after a stream's first event (1 run in 3 had such a cut).
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			if b, err := io.ReadAll(pr.In.Body); err == nil {
				pr.Out.Body, pr.Out.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			}
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			id, user := resp.Request.Header.Get("X-Test-Req"), resp.Request.Header.Get("X-Test-User")
			if id != "" {
				resp.Body = l.watch(id, user, resp)
			}
			return nil
		},
		// A dead head: the front door sees its connection close, as it
		// would the head's own.
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) },
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	l.srv = httptest.NewServer(rp)
	t.Cleanup(l.srv.Close)
	return l
}

func (l *headLog) port() int { return l.srv.Listener.Addr().(*net.TCPAddr).Port }

// watch tees an answer's body; once it has been read to its end, the
// usage in it is added up (an answer cut before its end reported none).
func (l *headLog) watch(id, user string, resp *http.Response) io.ReadCloser {
	l.mu.Lock()
	l.open[id] = user
	l.mu.Unlock()
	return &teeBody{ReadCloser: resp.Body, done: func(body []byte, whole bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.open, id)
		l.sent[id] += bytes.Count(body, []byte(`"content":"tok`))
		if !whole || resp.StatusCode != http.StatusOK {
			return
		}
		p, c, ok := reportedUsage(body, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
		if !ok {
			l.silent = append(l.silent, id)
			return
		}
		s := l.sums[user]
		if s == nil {
			s = &reported{}
			l.sums[user] = s
		}
		s.prompt, s.completion, s.answers = s.prompt+p, s.completion+c, s.answers+1
		l.reportedIDs[id] = true
	}}
}

// openNow counts the answers under way on this head.
func (l *headLog) openNow() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// teeBody keeps what is read; done is called once, at EOF (whole) or at
// an error or an early close (not whole).
type teeBody struct {
	io.ReadCloser
	buf  bytes.Buffer
	done func(body []byte, whole bool)
	once sync.Once
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	if err != nil {
		b.once.Do(func() { b.done(b.buf.Bytes(), err == io.EOF) })
	}
	return n, err
}

func (b *teeBody) Close() error {
	b.once.Do(func() { b.done(b.buf.Bytes(), false) })
	return b.ReadCloser.Close()
}

// reportedUsage reads the usage a head's answer reported: a JSON answer's
// usage (chat) or tokens_evaluated and tokens_predicted (/completion); a
// stream's usage chunk or closing stop event. ok is false when it has
// none.
func reportedUsage(body []byte, stream bool) (prompt, completion int, ok bool) {
	docs := [][]byte{body}
	if stream {
		docs = nil
		for _, line := range bytes.Split(body, []byte("\n")) {
			if d, found := bytes.CutPrefix(line, []byte("data: ")); found {
				docs = append(docs, d)
			}
		}
	}
	for _, d := range docs {
		var doc struct {
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
			Stop      bool `json:"stop"`
			Evaluated *int `json:"tokens_evaluated"`
			Predicted *int `json:"tokens_predicted"`
		}
		if json.Unmarshal(d, &doc) != nil {
			continue
		}
		switch {
		case doc.Usage != nil:
			return doc.Usage.Prompt, doc.Usage.Completion, true
		case doc.Stop && doc.Predicted != nil && doc.Evaluated != nil:
			return *doc.Evaluated, *doc.Predicted, true
		}
	}
	return 0, 0, false
}

// loadUser sends one user's requests through the front door (a static
// key) and keeps what its answers showed.
type loadUser struct {
	url, name, key string
	mu             sync.Mutex
	sent           int
	// answers are what the client saw of each answer, by request id.
	answers map[string]seen
}

// seen is what a client saw of one answer: whether it was streamed, its
// tokens, the tokens before its last continuation's comment (-1: not
// continued; the front door counts those as completion), whether it
// ended with the front door's "not continued" error, and whether the
// client left before its end.
type seen struct {
	stream          bool
	tokens, carried int
	refused, left   bool
	comment         string
}

// send posts body to path as u (hdr: more headers, name and value) and
// reads the answer to its end; with leave, the client leaves after 3
// tokens. reached is called once the answer has 3 tokens, or at its end.
func (u *loadUser) send(t *testing.T, path, body string, leave bool, reached func(), hdr ...string) int {
	u.mu.Lock()
	u.sent++
	id := fmt.Sprintf("%s-%d", u.name, u.sent)
	u.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+u.key)
	req.Header.Set("X-Test-User", u.name)
	req.Header.Set("X-Test-Req", id)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	var once sync.Once
	reach := func() {
		if reached != nil {
			once.Do(reached)
		}
	}
	defer reach()
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return 0
	}
	defer resp.Body.Close()
	a := seen{stream: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"), carried: -1}
	defer func() {
		u.mu.Lock()
		u.answers[id] = a
		u.mu.Unlock()
	}()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !a.stream:
		case strings.Contains(line, `"content":"tok`):
			a.tokens++
		case strings.HasPrefix(line, ": slurm-llm: continued"):
			a.carried, a.comment = a.tokens, line
		case strings.Contains(line, "not continued"):
			a.refused = true
		}
		if a.tokens == 3 {
			reach()
			if leave {
				a.left = true
				return resp.StatusCode
			}
		}
	}
	return resp.StatusCode
}

// expected is what u's row in usage must say given what the heads
// reported (reported: by request id, any head) and what u's client saw:
// the heads' prompt and completion tokens, a continued answer's carried
// tokens moved from prompt to completion, and a stream no head reported
// usage for counted by the tokens its client got; notes name the
// continued and the unreported answers.
func (u *loadUser) expected(heads reported, reportedIDs map[string]bool) (prompt, completion int, notes []string) {
	prompt, completion = heads.prompt, heads.completion
	for _, id := range slices.Sorted(maps.Keys(u.answers)) {
		a := u.answers[id]
		switch {
		case reportedIDs[id] && a.carried >= 0:
			prompt, completion = prompt-a.carried, completion+a.carried
			notes = append(notes, fmt.Sprintf("%s carried %d of %d tokens (%s)", id, a.carried, a.tokens, a.comment))
		case !reportedIDs[id] && a.stream && a.tokens > 0:
			completion += a.tokens
			notes = append(notes, fmt.Sprintf("%s: no usage from its heads, %d tokens to the client (not continued: %v)", id, a.tokens, a.refused))
		}
	}
	return prompt, completion, notes
}

// mixed is one user's load before the cut: streams (with usage asked,
// without, with stream_options null or include_usage false), whole
// answers, /completion both ways, the heads' own 400s (two assistant
// messages at the end), the front door's 400 (not JSON) and 404 (no such
// model), and a stream for the reasoning tier (no head; X-LLM-Hold: 0)
// that its backup model answers. It returns how many got each status.
func (u *loadUser) mixed(t *testing.T) map[int]int {
	chat := func(stream bool, extra string) string {
		return fmt.Sprintf(`{"model":"tiny","stream":%v,"max_tokens":6%s,"messages":[{"role":"user","content":"count for %s"}]}`, stream, extra, u.name)
	}
	const twoAssistants = `,"x":0,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a"},{"role":"assistant","content":"b"}]}`
	reqs := []struct {
		path, body string
		leave      bool
		hdr        []string
	}{
		{"/v1/chat/completions", chat(true, `,"stream_options":{"include_usage":true}`), false, nil},
		{"/v1/chat/completions", chat(true, `,"stream_options":{"include_usage":true}`), false, nil},
		{"/v1/chat/completions", chat(true, ""), false, nil},
		{"/v1/chat/completions", chat(true, ""), false, nil},
		{"/v1/chat/completions", chat(true, `,"stream_options":null`), false, nil},
		{"/v1/chat/completions", chat(true, `,"stream_options":{"include_usage":false}`), false, nil},
		{"/v1/chat/completions", chat(false, ""), false, nil},
		{"/v1/chat/completions", chat(false, ""), false, nil},
		{"/v1/chat/completions", chat(false, ""), false, nil},
		{"/completion", `{"model":"tiny","stream":true,"n_predict":5,"prompt":"count a while"}`, false, nil},
		{"/completion", `{"model":"tiny","stream":true,"n_predict":4,"prompt":"count"}`, false, nil},
		{"/completion", `{"model":"tiny","n_predict":3,"prompt":"count on"}`, false, nil},
		{"/v1/chat/completions", `{"model":"tiny"` + strings.Replace(twoAssistants, `"x":0,`, "", 1), false, nil},
		{"/v1/chat/completions", `{"model":"tiny","stream":true` + twoAssistants, false, nil},
		{"/v1/chat/completions", `not json`, false, nil},
		{"/v1/chat/completions", `{"model":"nope","messages":[]}`, false, nil},
		{"/v1/chat/completions", `{"model":"OR1-Behemoth","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"backup"}]}`, false, []string{"X-LLM-Hold", "0"}},
	}
	codes := map[int]int{}
	for _, r := range reqs {
		codes[u.send(t, r.path, r.body, r.leave, nil, r.hdr...)]++
	}
	return codes
}

// long are one user's streams of up to 60 tokens for the cut: two chat
// streams (usage asked, and not), a /completion stream, and a chat stream
// asking for two choices (n: not continued).
func (u *loadUser) long() []string {
	return []string{
		fmt.Sprintf(`{"model":"tiny","stream":true,"max_tokens":60,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"long one for %s"}]}`, u.name),
		fmt.Sprintf(`{"model":"tiny","stream":true,"max_tokens":60,"messages":[{"role":"user","content":"long two for %s"}]}`, u.name),
		`{"model":"tiny","stream":true,"n_predict":60,"prompt":"count long"}`,
		fmt.Sprintf(`{"model":"tiny","stream":true,"n":2,"messages":[{"role":"user","content":"long n for %s"}]}`, u.name),
	}
}

// TestE2EFrontUsageIsExact: two users send a mixed load through the
// front door over two fake heads (each behind a headLog; the reasoning
// tier has none and names the fast model its backup), then long streams
// of which those on one head are cut by killing that head with SIGKILL
// mid-stream: the front door continues them on the other head (the one
// asking for n=2 ends with its error); a third user leaves a stream after
// 3 tokens. Then the front door is stopped (its last usage batch written)
// and, per user, `llm-upstreams usage --json` has every request sent,
// and tokens equal to what the heads reported for that user's requests
// (the continued answers' carried tokens as completion, an answer no head
// reported for by the tokens its client got): 0 off; the third user's
// between what she read and what the head sent. Every finished answer of
// a head reported usage (the front door asked each chat stream's head
// for it).
func TestE2EFrontUsageIsExact(t *testing.T) {
	w := newDoorWorld(t)
	type headProc struct {
		log  *headLog
		kill func()
	}
	var heads []headProc
	for i := range 2 {
		port, cmd := w.head("tiny", "--parallel", "8", "--fake-tokens", "60", "--fake-token-rate", "50")
		l := newHeadLog(t, port)
		w.publish(fmt.Sprint(101+i), l.port(), "tiny")
		heads = append(heads, headProc{log: l, kill: func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }})
	}
	keysFile, keys := w.staticKeys("alice", "bob", "carol")
	fport := faketest.FreePort(t)
	cfg := w.config("usage", fmt.Sprintf("127.0.0.1:%d", fport), fmt.Sprintf(`[front.auth]
mode = "identify"
static_keys_file = %q
slurm_accounts = false
[front.tiers.reasoning]
models = ["OR1-Behemoth"]
backup_model = "tiny"
`, keysFile))
	url := fmt.Sprintf("http://127.0.0.1:%d", fport)
	door := w.front(cfg, url)
	users := []*loadUser{{url: url, name: "alice", key: keys["alice"], answers: map[string]seen{}},
		{url: url, name: "bob", key: keys["bob"], answers: map[string]seen{}}}
	carol := &loadUser{url: url, name: "carol", key: keys["carol"], answers: map[string]seen{}}

	var wg sync.WaitGroup
	codes := make([]map[int]int, len(users))
	for i, u := range users {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = u.mixed(t) }()
	}
	carol.send(t, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"long for carol"}]}`, true, nil)
	wg.Wait()
	for i, u := range users {
		if d := cmp.Diff(map[int]int{200: 13, 400: 3, 404: 1}, codes[i]); d != "" {
			t.Errorf("%s's statuses before the cut (-want +got):\n%s", u.name, d)
		}
	}

	// the cut: every long stream under way, then the head with the most of
	// them killed
	var reached sync.WaitGroup
	for _, u := range users {
		for _, body := range u.long() {
			path := "/v1/chat/completions"
			if strings.Contains(body, `"prompt"`) {
				path = "/completion"
			}
			wg.Add(1)
			reached.Add(1)
			go func() { defer wg.Done(); u.send(t, path, body, false, reached.Done) }()
		}
	}
	reached.Wait()
	victim := heads[0]
	if heads[1].log.openNow() > victim.log.openNow() {
		victim = heads[1]
	}
	cut := victim.log.openNow()
	victim.kill()
	wg.Wait()
	w.stop(door)

	rows, rep := w.usage(cfg)
	reportedIDs, sent := map[string]bool{}, map[string]int{}
	for _, h := range heads {
		h.log.mu.Lock()
		for id := range h.log.reportedIDs {
			reportedIDs[id] = true
		}
		for id, n := range h.log.sent {
			sent[id] += n
		}
		h.log.mu.Unlock()
	}
	continued, refused := 0, 0
	for _, u := range users {
		var sum reported
		for _, h := range heads {
			h.log.mu.Lock()
			if s := h.log.sums[u.name]; s != nil {
				sum.prompt, sum.completion, sum.answers = sum.prompt+s.prompt, sum.completion+s.completion, sum.answers+s.answers
			}
			h.log.mu.Unlock()
		}
		for _, a := range u.answers {
			if a.carried >= 0 {
				continued++
			}
			if a.refused {
				refused++
			}
		}
		prompt, completion, notes := u.expected(sum, reportedIDs)
		r := rows[u.name]
		t.Logf("%s: %d requests sent, %d in usage (%d errors); the heads reported %d prompt + %d completion tokens in %d answers; usage has %d + %d; %s",
			u.name, u.sent, r.Requests, r.Errors, sum.prompt, sum.completion, sum.answers, r.PromptTokens, r.CompletionTokens, strings.Join(notes, "; "))
		want := [3]int64{int64(u.sent), int64(prompt), int64(completion)}
		if d := cmp.Diff(want, [3]int64{r.Requests, r.PromptTokens, r.CompletionTokens}); d != "" {
			t.Errorf("%s: requests, prompt and completion tokens in usage (-want: sent, and the heads' report with what the client got where the heads reported nothing +got):\n%s", u.name, d)
		}
	}
	left, r := carol.answers["carol-1"], rows["carol"]
	t.Logf("carol left after %d tokens; the head sent %d; usage has %d request, %d + %d tokens", left.tokens, sent["carol-1"], r.Requests, r.PromptTokens, r.CompletionTokens)
	if !left.left || r.Requests != 1 || r.PromptTokens != 0 || r.CompletionTokens < int64(left.tokens) || r.CompletionTokens > int64(sent["carol-1"]) {
		t.Errorf("carol's stream, left after %d tokens of the %d the head sent: usage %+v, want 1 request, 0 prompt and completion tokens between the two", left.tokens, sent["carol-1"], r)
	}
	if rep.Dropped != 0 || rep.UncleanStops != 0 {
		t.Errorf("usage lost records: dropped %d, unclean stops %d", rep.Dropped, rep.UncleanStops)
	}
	t.Logf("the killed head had %d streams under way: %d continued, %d not (n=2)", cut, continued, refused)
	if continued == 0 {
		t.Errorf("no stream was continued (the killed head had %d under way): the test crossed no continuation", cut)
	}
	for _, h := range heads {
		if h.log.silent != nil {
			t.Errorf("finished answers without usage (the front door did not ask the head for it): %v", h.log.silent)
		}
	}
}
