package front

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"slurm-llm/endpoints/promtest"
	"slurm-llm/endpoints/tiers"
)

func TestRoutesByModel(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Aliases = map[string]string{"gpt-4o-mini": "qwen-a"}
	})
	fast := newTestHead(t, "fast", "101", "qwen-a", "qwen-b")
	reas := newTestHead(t, "reasoning", "102", "OR1-Behemoth")
	r.route(nil, fast, reas)
	for _, tc := range []struct {
		name, model, tier, body string
	}{
		{"router model", "qwen-b", "fast", `"from 101"`},
		{"single model", "OR1-Behemoth", "reasoning", `"from 102"`},
		{"alias", "gpt-4o-mini", "fast", `"model":"qwen-a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr, body := r.do(tc.model, tc.name)
			if code != http.StatusOK || hdr.Get(TierHeader) != tc.tier || !strings.Contains(body, tc.body) {
				t.Errorf("got %d tier %q %s; want 200 from tier %s with %s", code, hdr.Get(TierHeader), body, tc.tier, tc.body)
			}
		})
	}
	code, _, body := r.do("nope", "x")
	var doc struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
		Models []string `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || code != http.StatusNotFound {
		t.Fatalf("unknown model: got %d %s (%v); want 404 in OpenAI's error shape", code, body, err)
	}
	if d := cmp.Diff([]string{"OR1-Behemoth", "gpt-4o-mini", "qwen-a", "qwen-b"}, doc.Models); d != "" || doc.Error.Type != "model_not_found" {
		t.Errorf("unknown model: error %q, models (-want +got):\n%s", doc.Error.Type, d)
	}
}

func TestModelsListsEveryRoutedHeadOnceWithItsTier(t *testing.T) {
	r := newRig(t, nil)
	a := newTestHead(t, "fast", "101", "qwen-a", "qwen-b")
	b := newTestHead(t, "fast", "103", "qwen-a", "qwen-b")
	reas := newTestHead(t, "reasoning", "102", "OR1-Behemoth")
	// Router mode (fact 32): every model with its status; replica a has
	// qwen-a unloaded, replica b has it loaded: the list says loaded.
	a.modelsDoc = `{"object":"list","data":[{"id":"qwen-a","object":"model","status":{"value":"unloaded"}},{"id":"qwen-b","object":"model","status":{"value":"failed","exit_code":1}}]}`
	b.modelsDoc = `{"object":"list","data":[{"id":"qwen-a","object":"model","status":{"value":"loaded"}},{"id":"qwen-b","object":"model","status":{"value":"failed","exit_code":1}}]}`
	r.route(nil, a, b, reas)
	r.s.poller.pollAll(context.Background(), r.s.tab.Load().allHeads())
	resp, err := http.Get(r.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	type row struct{ ID, Tier, Status string }
	var got []row
	for _, d := range doc.Data {
		st, _ := d["status"].(map[string]any)
		v, _ := st["value"].(string)
		got = append(got, row{d["id"].(string), d["tier"].(string), v})
	}
	want := []row{{"qwen-a", "fast", "loaded"}, {"qwen-b", "fast", "failed"}, {"OR1-Behemoth", "reasoning", "loaded"}} // a model-mode head's model: loaded
	if d := cmp.Diff(want, got); d != "" || doc.Object != "list" {
		t.Errorf("/v1/models (-want +got):\n%s", d)
	}
}

func TestStreamIsFlushedChunkByChunk(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "101", "qwen-a")
	h.gate = make(chan struct{})
	r.route(nil, h)
	resp, err := r.post(nil, "qwen-a", "s", true)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for { // the head sent its role chunk and one token, and waits at the gate
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("before the first token: %v", err)
		}
		if strings.Contains(line, `"t0 "`) {
			break
		}
	}
	close(h.gate)
	events, err := sseEvents(br)
	if err != nil || len(events) != 4 || events[3] != "[DONE]" {
		t.Errorf("rest of the stream: %q %v", events, err)
	}
}

func TestHeldRequestsGoInArrivalOrderWhenTheTierIsRouted(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "reasoning", "102", "OR1-Behemoth")
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonStarting}})
	r.s.mu.Lock()
	r.s.learned["OR1-Behemoth"] = "reasoning" // as a starting file would have named it
	r.s.mu.Unlock()
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := r.do("OR1-Behemoth", fmt.Sprint(i))
			codes[i] = code
		}()
		waitFor(t, fmt.Sprintf("request %d held", i), func() bool { return r.held("reasoning") == i+1 })
	}
	r.route(nil, h)
	wg.Wait()
	if d := cmp.Diff([]int{200, 200, 200, 200}, codes); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
	// Each is handed to the transport only once the one before it was
	// written to its connection (the head itself reads its connections in
	// whatever order its goroutines run).
	if d := cmp.Diff([]string{"0", "1", "2", "3"}, r.sent.order()); d != "" {
		t.Errorf("sent out of arrival order (-want +got):\n%s", d)
	}
	if got := len(h.requests()); got != 4 {
		t.Errorf("the head got %d requests, want 4", got)
	}
	if n := testutil.CollectAndCount(r.s.metrics.held); n != 1 {
		t.Errorf("held histogram: %d series, want 1 (tier reasoning)", n)
	}
}

func TestNotBackInTimeIsAnsweredAtOnce(t *testing.T) {
	r := newRig(t, nil)
	back := time.Now().Add(time.Hour).Truncate(time.Second)
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonPreempted,
		ExpectedBack: &back, RetryAfter: 3600}})
	r.s.cfg.Load().Tiers["reasoning"] = TierConfig{Hold: time.Minute, MaxHeld: 4, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	code, hdr, body := r.do("OR1-Behemoth", "x")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "3600" || hdr.Get(TierHeader) != "none" {
		t.Fatalf("got %d Retry-After %q tier %q; want 503, 3600, none", code, hdr.Get("Retry-After"), hdr.Get(TierHeader))
	}
	var doc struct {
		Reason       string `json:"reason"`
		ExpectedBack string `json:"expected_back"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Reason != tiers.ReasonPreempted ||
		doc.ExpectedBack != back.UTC().Format(time.RFC3339) {
		t.Errorf("body %s: want the view's reason and expected_back", body)
	}
	if !strings.Contains(r.accessLog(), `held_ms=0 `) || !strings.Contains(r.accessLog(), `why="no hold: expected back after`) {
		t.Errorf("access log: want no hold and why:\n%s", r.accessLog())
	}
}

func TestHoldEndsAtItsDeadlineOrWhenTheViewSaysNo(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: time.Hour, MaxHeld: 8, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	})
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonStarting}})
	code, _, _ := r.do("OR1-Behemoth", "x", HoldHeader, "50ms")
	if code != http.StatusServiceUnavailable || !strings.Contains(r.accessLog(), `why="held until the request's hold ended"`) {
		t.Errorf("a hold of 50ms: got %d, log:\n%s", code, r.accessLog())
	}
	done := make(chan int)
	go func() {
		code, _, _ := r.do("OR1-Behemoth", "y") // an hour's hold
		done <- code
	}()
	waitFor(t, "the request held", func() bool { return r.held("reasoning") == 1 })
	back := time.Now().Add(2 * time.Hour)
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonPreempted, ExpectedBack: &back}})
	if code := <-done; code != http.StatusServiceUnavailable {
		t.Errorf("after the view said 2 h: got %d, want 503 at once", code)
	}
}

func TestHoldIsBounded(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: time.Hour, MaxHeld: 1, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	})
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonStarting}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"OR1-Behemoth","messages":[]}`))
	go http.DefaultClient.Do(req)
	waitFor(t, "one request held", func() bool { return r.held("reasoning") == 1 })
	code, hdr, body := r.do("OR1-Behemoth", "second")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "busy") || hdr.Get("Retry-After") == "" {
		t.Errorf("second request past max_held 1: got %d %s", code, body)
	}
	cancel() // a client that leaves leaves the queue
	waitFor(t, "the queue empty", func() bool { return r.held("reasoning") == 0 })
}

func TestRetryBeforeTheFirstByte(t *testing.T) {
	for _, mode := range []string{"refused", "503", "reset"} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t, nil)
			bad := newTestHead(t, "fast", "101", "qwen-a")
			good := newTestHead(t, "fast", "103", "qwen-a")
			if mode == "refused" {
				bad.srv.Close() // its port refuses
			} else {
				bad.setMode(mode)
			}
			r.route(nil, bad, good)
			for i := 0; i < 4; i++ {
				if code, hdr, body := r.do("qwen-a", fmt.Sprint(i)); code != http.StatusOK || !strings.Contains(body, "from 103") ||
					hdr.Get(TierHeader) != "fast" {
					t.Fatalf("request %d: got %d %s; want the good head's answer", i, code, body)
				}
			}
			if got := testutil.ToFloat64(r.s.metrics.retries.WithLabelValues("fast", map[bool]string{true: "head_503", false: "error"}[mode == "503"])); got < 1 {
				t.Errorf("retries counted: %v, want at least 1", got)
			}
		})
	}
}

func TestNothingIsSentTwiceOnceTheAnswerStarted(t *testing.T) {
	r := newRig(t, func(c *Config) {
		ft := c.Tiers["fast"]
		ft.Continue = false // the continuation is TestContinues…'s
		c.Tiers["fast"] = ft
	})
	cut := newTestHead(t, "fast", "101", "qwen-a")
	cut.setMode("cut")
	other := newTestHead(t, "fast", "103", "qwen-a")
	other.srv.Close() // only the cutting head can be picked
	r.route(nil, cut, other)
	resp, err := r.post(nil, "qwen-a", "s", true)
	if err != nil {
		t.Fatal(err)
	}
	events, err := sseEvents(resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 4 || !strings.Contains(events[3], `"error"`) || !strings.Contains(events[3], "continuation is off") {
		t.Errorf("a stream cut after 2 tokens: got %q, %v; want the role chunk, the 2 tokens, then an error event saying why", events, err)
	}
	if got := cut.requests(); len(got) != 1 {
		t.Errorf("the head got %d requests, want 1", len(got))
	}
	waitFor(t, "the access log line", func() bool { return strings.Contains(r.accessLog(), "outcome=cut") })
}

func TestClientCancellationReachesTheHead(t *testing.T) {
	r := newRig(t, nil)
	h := newTestHead(t, "fast", "101", "qwen-a")
	h.setMode("block")
	r.route(nil, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"qwen-a","stream":true,"messages":[]}`))
	go func() {
		waitFor(t, "the head to get the request", func() bool { return len(h.requests()) == 1 })
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.Canceled) {
		t.Errorf("client: %v", err)
	}
	select {
	case <-h.left:
	case <-time.After(10 * time.Second):
		t.Fatal("the head's request was not cancelled: its slot would stay busy")
	}
}

func TestKeptAliveConnectionsSurviveRoutingChanges(t *testing.T) {
	r := newRig(t, nil)
	fast := newTestHead(t, "fast", "101", "qwen-a")
	reas := newTestHead(t, "reasoning", "102", "OR1-Behemoth")
	r.route(nil, fast, reas)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	stop := make(chan struct{})
	var changes sync.WaitGroup
	changes.Add(1)
	go func() { // 100 routing changes: the reasoning tier routed, unrouted, routed…
		defer changes.Done()
		for i := 0; i < 100; i++ {
			if i%2 == 0 {
				r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonReplanning}}, fast)
			} else {
				r.route(nil, fast, reas)
			}
		}
		close(stop)
	}()
	failed := 0
	for n := 0; ; n++ {
		resp, err := r.post(client, "qwen-a", fmt.Sprint(n), false)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			failed++
		}
		select {
		case <-stop:
			changes.Wait()
			if failed != 0 || r.conns.Load() != 1 {
				t.Errorf("%d requests over 100 routing changes: %d failed, %d connections; want 0 and 1", n+1, failed, r.conns.Load())
			}
			return
		default:
		}
	}
}

func TestBackupModelOnlyWhereConfigured(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: time.Second, MaxHeld: 8, MaxHeldBytes: 1 << 20,
			Models: []string{"OR1-Behemoth"}, BackupModel: "qwen-a"}
	})
	fast := newTestHead(t, "fast", "101", "qwen-a")
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonDisabled}}, fast)
	code, hdr, body := r.do("OR1-Behemoth", "x")
	if code != http.StatusOK || hdr.Get(TierHeader) != "fast" || !strings.Contains(body, `"model":"qwen-a"`) {
		t.Errorf("backup: got %d tier %q %s; want qwen-a's answer from tier fast", code, hdr.Get(TierHeader), body)
	}
	if got := testutil.ToFloat64(r.s.metrics.requests.WithLabelValues("reasoning", "OR1-Behemoth", OutcomeBackup)); got != 1 {
		t.Errorf("requests{outcome=backup}: %v, want 1", got)
	}
}

// TestNoModelIsTheUITiers: a request that names no model (llama-server's
// own web UI at the root URL sends none) is the UI tier's, as it was its
// llama-server's: its model when it serves one, else 400 with the list.
func TestNoModelIsTheUITiers(t *testing.T) {
	r := newRig(t, func(c *Config) { c.UITier = "reasoning" })
	r.route(nil, newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "reasoning", "102", "OR1-Behemoth"))
	code, hdr, body := r.do("", "x")
	if code != http.StatusOK || hdr.Get(TierHeader) != "reasoning" || !strings.Contains(body, `"model":"OR1-Behemoth"`) {
		t.Errorf("no model: %d tier %q %s; want the UI tier's model", code, hdr.Get(TierHeader), body)
	}
	two := newRig(t, nil)
	two.route(nil, newTestHead(t, "fast", "101", "qwen-a", "qwen-b"))
	if code, _, body := two.do("", "x"); code != http.StatusBadRequest || !strings.Contains(body, "is required") {
		t.Errorf("no model, the UI tier serving two: %d %s; want 400", code, body)
	}
}

func TestRequestLimitsAndBadRequests(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxBodyBytes = 4 << 10 })
	r.route(nil, newTestHead(t, "fast", "101", "qwen-a"))
	for _, tc := range []struct {
		name, path, method, body string
		code                     int
	}{
		{"too large", "/v1/chat/completions", "POST", `{"model":"qwen-a","x":"` + strings.Repeat("a", 5<<10) + `"}`, 413},
		{"not JSON", "/v1/chat/completions", "POST", `hello`, 400},
		{"no model: the UI tier's one model", "/v1/chat/completions", "POST", `{"messages":[]}`, 200},
		{"GET a POST path", "/v1/chat/completions", "GET", ``, 405},
		{"unknown path", "/admin", "GET", ``, 404},
		{"bad hold header", "/v1/chat/completions", "POST", `{"model":"qwen-a"}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, r.srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.name == "bad hold header" {
				req.Header.Set(HoldHeader, "soon")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.code)
			}
		})
	}
}

func TestHoldHeader(t *testing.T) {
	r := newRig(t, func(c *Config) { c.HoldMax = time.Minute })
	for _, tc := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{
		{"", DefaultTier.Hold, false}, {"90s", time.Minute, false}, {"5", 5 * time.Second, false},
		{"0", 0, false}, {"1.5", 1500 * time.Millisecond, false}, {"-1s", 0, true}, {"soon", 0, true},
	} {
		req, _ := http.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set(HoldHeader, tc.v)
		got, err := r.s.holdFor(req, "fast")
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s %q: got %v, %v; want %v (error %v)", HoldHeader, tc.v, got, err, tc.want, tc.bad)
		}
	}
}

var updateMetrics = flag.Bool("update-metrics", false, "rewrite testdata/metrics-families.golden")

// The front door's metric families, types, labels and help texts are a
// contract with dashboards and alerts (-args -update-metrics rewrites the
// golden file on purpose).
func TestMetricFamiliesGolden(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Tiers["reasoning"] = TierConfig{Hold: time.Minute, MaxHeld: 8, MaxHeldBytes: 1 << 20, Models: []string{"OR1-Behemoth"}}
	})
	bad, good := newTestHead(t, "fast", "101", "qwen-a"), newTestHead(t, "fast", "103", "qwen-a")
	bad.setMode("503")
	r.route([]tiers.TierView{{Tier: "reasoning", State: tiers.StateDown, Reason: tiers.ReasonStarting}}, bad, good)
	for i := 0; i < 3; i++ {
		r.do("qwen-a", fmt.Sprint("x", i)) // three conversations: not one head's by affinity
	}
	r.do("OR1-Behemoth", "y", HoldHeader, "20ms")
	c, d := newTestHead(t, "fast", "104", "qwen-a"), newTestHead(t, "fast", "105", "qwen-a")
	c.tokens = 4
	r.cutOnto(c, d, func() (answer, error) { return r.streamAnswer("/v1/chat/completions", "", userMsg) })
	fams, err := promtest.Families(r.s.Metrics().Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(fams, "\n") + "\n"
	golden := filepath.Join("testdata", "metrics-families.golden")
	if *updateMetrics {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("metric families (-want +got):\n%s", d)
	}
}
