package front

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"slurm-llm/endpoints/front/wire"
)

// What a head really has (issue 38): the front door counts the requests
// it sent to a head, but a head also serves requests that reached it
// another way (nginx's ports, another front door). While a head has as
// many of the front door's requests as its slots, the front door asks it
// every load_refresh what it has (llama-server's /metrics, or /slots) and
// counts the rest as the head's others (head.others): each of them lets
// one more of the front door's requests into the head's first-come,
// first-served queue, so that the front door's clients stand there as the
// others do instead of waiting behind them in the front door.

// maxLoadBody bounds a head's /metrics or /slots answer.
const maxLoadBody = 1 << 20

// errNoMetrics is a head that serves no /metrics (run without --metrics:
// 501): its /slots is read instead.
var errNoMetrics = errors.New("the head serves no /metrics")

// headLoad is what a head said it has: requests in its slots and waiting
// in its own queue (deferred; -1 when it did not say: /slots has no such
// count).
type headLoad struct {
	processing, deferred int64
}

// total is every request the head has, as far as it said.
func (l headLoad) total() int64 { return l.processing + max(l.deferred, 0) }

// parseMetrics reads llamacpp:requests_processing and
// llamacpp:requests_deferred from a /metrics answer (Prometheus text; the
// values are written as doubles, "2" or "2.5e+01").
func parseMetrics(r io.Reader) (headLoad, error) {
	l := headLoad{processing: -1, deferred: -1}
	sc := bufio.NewScanner(io.LimitReader(r, maxLoadBody))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("llamacpp:requests_processing ")):
			dst = &l.processing
		case bytes.HasPrefix(line, []byte("llamacpp:requests_deferred ")):
			dst = &l.deferred
		default:
			continue
		}
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(line[bytes.IndexByte(line, ' ')+1:])), 64)
		if err != nil || f < 0 || f > 1e9 {
			return headLoad{}, fmt.Errorf("/metrics: %q: not a count", wire.Echo(string(line)))
		}
		*dst = int64(f)
	}
	if err := sc.Err(); err != nil {
		return headLoad{}, fmt.Errorf("/metrics: %w", err)
	}
	if l.processing < 0 || l.deferred < 0 {
		return headLoad{}, errors.New("/metrics: no llamacpp:requests_processing or requests_deferred")
	}
	return l, nil
}

// parseSlots reads how many of a /slots answer's slots are processing; it
// says nothing of the requests deferred.
func parseSlots(r io.Reader) (headLoad, error) {
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(io.LimitReader(r, maxLoadBody)).Decode(&slots); err != nil {
		return headLoad{}, fmt.Errorf("/slots: %w", err)
	}
	l := headLoad{deferred: -1}
	for _, s := range slots {
		if s.IsProcessing {
			l.processing++
		}
	}
	return l, nil
}

// get asks h for path and hands a 200's body to parse; a 501 (llama-server
// run without --metrics) is errNoMetrics.
func (p *poller) get(ctx context.Context, h *head, path string, parse func(io.Reader) (headLoad, error)) (headLoad, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.addr+path, nil)
	if err != nil {
		return headLoad{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return headLoad{}, err
	}
	defer resp.Body.Close()
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, maxLoadBody)) //nolint:errcheck // the connection is kept for the next poll
	switch {
	case resp.StatusCode == http.StatusNotImplemented:
		return headLoad{}, errNoMetrics
	case resp.StatusCode != http.StatusOK:
		return headLoad{}, fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return parse(resp.Body)
}

// pollLoad asks h what it has (its /metrics; its /slots when it serves
// none) and sets h.others to what is beyond the front door's own requests
// (ours: h's in-flight count when the answer came; a request of the front
// door on its way there or back is not on the head, so others is at worst
// counted short).
func (p *poller) pollLoad(ctx context.Context, h *head) error {
	l, err := p.get(ctx, h, "/metrics", parseMetrics)
	if errors.Is(err, errNoMetrics) {
		l, err = p.get(ctx, h, "/slots", parseSlots)
	}
	if err != nil {
		return err
	}
	h.others.Store(max(0, l.total()-h.inFlight.Load()))
	return nil
}

// loadPolled reports whether h is asked what it has at this round: it
// has a known number of slots, and the front door's requests fill them
// (below that, the front door sends it one more whatever others it has),
// or the last poll found others (to see them go).
func loadPolled(h *head) bool {
	n := h.slots.Load()
	return n > 0 && (h.inFlight.Load() >= n || h.others.Load() > 0)
}

// pollLoads asks every head that loadPolled picks what it has, at most 8
// at a time, and then looks at every held request again (a head with
// more others takes more). A head that does not answer keeps its last
// count.
func (s *Server) pollLoads(ctx context.Context) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, h := range s.tab.Load().allHeads() {
		if !loadPolled(h) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.poller.pollLoad(ctx, h); err != nil {
				s.log.Debug("cannot read a head's load", "tier", h.tier, "head", h.addr, "error", err)
			}
		}()
	}
	wg.Wait()
	for _, q := range s.allQueues() {
		if q.waiting.Load() > 0 {
			s.dispatch(q)
		}
	}
}

// runLoads polls the heads' load every load_refresh until ctx ends.
func (s *Server) runLoads(ctx context.Context) {
	tick := time.NewTimer(s.cfg.Load().LoadRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.pollLoads(ctx)
		tick.Reset(s.cfg.Load().LoadRefresh)
	}
}
