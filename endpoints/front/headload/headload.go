// Package headload reads what a head has now (issue 38): the requests in
// its slots and waiting in its own queue, as llama-server's /metrics says
// (requests_processing, requests_deferred) or, for a head run without
// --metrics, as its /slots does (those processing; it says nothing of the
// deferred). When a head is asked, and what its requests beyond the front
// door's own change, are the front door's.
package headload

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
	"time"

	"slurm-llm/endpoints/front/wire"
)

// Read asks the head at addr (host:port) through client what it has: its
// /metrics, its /slots when it serves none; each asked within timeout.
func Read(ctx context.Context, client *http.Client, addr string, timeout time.Duration) (Load, error) {
	l, err := get(ctx, client, addr, "/metrics", timeout, parseMetrics)
	if errors.Is(err, errNoMetrics) {
		l, err = get(ctx, client, addr, "/slots", timeout, parseSlots)
	}
	return l, err
}

// maxLoadBody bounds a head's /metrics or /slots answer.
const maxLoadBody = 1 << 20

// errNoMetrics is a head that serves no /metrics (run without --metrics:
// 501): its /slots is read instead.
var errNoMetrics = errors.New("the head serves no /metrics")

// Load is what a head said it has. The zero value is a head with nothing.
type Load struct {
	// Processing is the requests in its slots; Deferred those waiting in
	// its own queue (-1 when it did not say: /slots has no such count).
	Processing, Deferred int64
}

// Total is every request the head has, as far as it said.
func (l Load) Total() int64 { return l.Processing + max(l.Deferred, 0) }

// parseMetrics reads llamacpp:requests_processing and
// llamacpp:requests_deferred from a /metrics answer (Prometheus text; the
// values are written as doubles, "2" or "2.5e+01").
func parseMetrics(r io.Reader) (Load, error) {
	l := Load{Processing: -1, Deferred: -1}
	sc := bufio.NewScanner(io.LimitReader(r, maxLoadBody))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("llamacpp:requests_processing ")):
			dst = &l.Processing
		case bytes.HasPrefix(line, []byte("llamacpp:requests_deferred ")):
			dst = &l.Deferred
		default:
			continue
		}
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(line[bytes.IndexByte(line, ' ')+1:])), 64)
		if err != nil || f < 0 || f > 1e9 {
			return Load{}, fmt.Errorf("/metrics: %q: not a count", wire.Echo(string(line)))
		}
		*dst = int64(f)
	}
	if err := sc.Err(); err != nil {
		return Load{}, fmt.Errorf("/metrics: %w", err)
	}
	if l.Processing < 0 || l.Deferred < 0 {
		return Load{}, errors.New("/metrics: no llamacpp:requests_processing or requests_deferred")
	}
	return l, nil
}

// parseSlots reads how many of a /slots answer's slots are processing; it
// says nothing of the requests deferred.
func parseSlots(r io.Reader) (Load, error) {
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(io.LimitReader(r, maxLoadBody)).Decode(&slots); err != nil {
		return Load{}, fmt.Errorf("/slots: %w", err)
	}
	l := Load{Deferred: -1}
	for _, s := range slots {
		if s.IsProcessing {
			l.Processing++
		}
	}
	return l, nil
}

// get asks the head at addr for path and hands a 200's body to parse; a
// 501 (llama-server run without --metrics) is errNoMetrics.
func get(ctx context.Context, client *http.Client, addr, path string, timeout time.Duration, parse func(io.Reader) (Load, error)) (Load, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return Load{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Load{}, err
	}
	defer resp.Body.Close()
	defer io.Copy(io.Discard, io.LimitReader(resp.Body, maxLoadBody)) //nolint:errcheck // the connection is kept for the next poll
	switch {
	case resp.StatusCode == http.StatusNotImplemented:
		return Load{}, errNoMetrics
	case resp.StatusCode != http.StatusOK:
		return Load{}, fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return parse(resp.Body)
}
