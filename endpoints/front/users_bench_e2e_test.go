//go:build e2e

package front_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
	"slurm-llm/endpoints/front"
)

// Who uses the front door, measured through the real one (issue 28): a
// fair share of a busy tier, and what identity and accounting cost each
// request. `llm-upstreams front` runs as a process over fake llama.cpp
// heads on loopback (doorWorld).

// fairDoor is one front door of the fair-share benchmark: its client URL
// and its /status.
type fairDoor struct {
	name, url, status string
}

// BenchmarkE2EFrontFairShare: one fake head with 2 slots answering 20
// tokens at 50 tokens/s (0.4 s a request); alice keeps 40 requests
// outstanding (each of her 40 clients sends its next as soon as its last
// is answered), bob sends one at a time. Bob's wait for a slot (his
// stream's first byte: the head sends it when a slot starts his request)
// is measured through a front door with [front.fair_share] enabled and
// through one with it off (arrival order), in the same run on the same
// head; it reports each median, and the service time. Goal: with fair
// share bob waits about one request's service time at most; in arrival
// order he waits behind alice's queue (38 requests over 2 slots: ~7.6 s).
func BenchmarkE2EFrontFairShare(b *testing.B) {
	const tokens, rate, outstanding, samples = 20, 50, 40, 7
	w := newDoorWorld(b)
	port, _ := w.head("tiny", "--parallel", "2", "--fake-tokens", strconv.Itoa(tokens), "--fake-token-rate", strconv.Itoa(rate))
	w.publish("101", port, "tiny")
	keysFile, keys := w.staticKeys("alice", "bob")
	var doors []fairDoor
	for _, fair := range []bool{true, false} {
		name := map[bool]string{true: "fair", false: "fifo"}[fair]
		fport, mport := faketest.FreePort(b), faketest.FreePort(b)
		cfg := w.config(name, fmt.Sprintf("127.0.0.1:%d", fport), fmt.Sprintf(`models_refresh = "1s"
metrics_listen = "127.0.0.1:%d"
[front.auth]
mode = "identify"
static_keys_file = %q
slurm_accounts = false
[front.fair_share]
enabled = %v
`, mport, keysFile, fair))
		d := fairDoor{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", fport), status: fmt.Sprintf("http://127.0.0.1:%d/status", mport)}
		w.front(cfg, d.url)
		doors = append(doors, d)
	}
	head := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < b.N; i++ {
		res := map[string][2]time.Duration{}
		var line []string
		for _, d := range doors {
			waits, services := fairShareRun(b, d, keys, outstanding, samples)
			waitIdle(b, head)
			res[d.name] = [2]time.Duration{pct(waits, .5), pct(services, .5)}
			line = append(line, fmt.Sprintf("%s: bob's wait median %.2f s (max %.2f s), served in %.2f s",
				d.name, pct(waits, .5).Seconds(), waits[len(waits)-1].Seconds(), pct(services, .5).Seconds()))
			b.ReportMetric(pct(waits, .5).Seconds(), "bob-wait-s("+d.name+")")
		}
		b.ReportMetric(res["fair"][1].Seconds(), "service-s")
		b.Logf("1 head of 2 slots, alice %d outstanding, bob one at a time (%d each): %s", outstanding, samples, strings.Join(line, "; "))
	}
}

// fairShareRun keeps alice's requests outstanding through d, and returns
// bob's waits for a slot and his answers' service times, sorted.
func fairShareRun(b *testing.B, d fairDoor, keys map[string]string, outstanding, samples int) (waits, services []time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: outstanding + 1}
	defer func() { // also after a Fatal: alice's clients end
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	}()
	c := &http.Client{Transport: tr}
	body := `{"model":"tiny","messages":[{"role":"user","content":"count"}]}`
	for range outstanding {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+keys["alice"])
				if resp, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	waitHeld(b, d.status, outstanding-4) // 2 in the head's slots, 2 in its own queue (head_queue)
	stream := `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"count"}]}`
	for range samples {
		req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/chat/completions", strings.NewReader(stream))
		req.Header.Set("Authorization", "Bearer "+keys["bob"])
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		_, err = br.ReadString('\n')
		first := time.Since(start)
		_, _ = io.Copy(io.Discard, br)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: bob's request: %d %v", d.name, resp.StatusCode, err)
		}
		waits = append(waits, first)
		services = append(services, time.Since(start)-first)
	}
	slices.Sort(waits)
	slices.Sort(services)
	return waits, services
}

// waitHeld waits until the front door's /status shows at least n requests
// held for tier fast (its head's slots are known and taken).
func waitHeld(b *testing.B, status string, n int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st front.Status
		if resp, err := http.Get(status); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		for _, ts := range st.Tiers {
			if ts.Tier == "fast" && ts.Held >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never held %d requests: %+v", status, n, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitIdle waits until the fake head's /slots show none processing.
func waitIdle(b *testing.B, head string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(head + "/slots"); err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && !strings.Contains(string(raw), `"is_processing":true`) {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the head at %s never went idle", head)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
