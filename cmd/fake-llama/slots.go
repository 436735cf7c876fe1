package main

import (
	"context"
	"sync"
)

// slotTable is the head's n parallel slots: a request takes a free slot or waits
// (deferred) until one frees, as llama-server does with --parallel (fact 16).
type slotTable struct {
	free chan int

	mu        sync.Mutex
	busy      []bool
	deferred  int
	streams   int
	predicted int
	prompt    int
	decodes   int
}

func newSlotTable(n int) *slotTable {
	s := &slotTable{free: make(chan int, n), busy: make([]bool, n)}
	for i := 0; i < n; i++ {
		s.free <- i
	}
	return s
}

// acquire takes a slot, counting the request as deferred while it waits.
func (s *slotTable) acquire(ctx context.Context) (int, error) {
	select {
	case id := <-s.free:
		s.mark(id, true)
		return id, nil
	default:
	}
	s.mu.Lock()
	s.deferred++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.deferred--
		s.mu.Unlock()
	}()
	select {
	case id := <-s.free:
		s.mark(id, true)
		return id, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *slotTable) release(id int) {
	s.mark(id, false)
	s.free <- id
}

func (s *slotTable) mark(id int, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[id] = busy
}

// addStream counts streamed completions in flight (+1 at start, -1 at end).
func (s *slotTable) addStream(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams += delta
}

// addTokens counts work done, for /metrics.
func (s *slotTable) addTokens(prompt, predicted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prompt += prompt
	s.predicted += predicted
	if predicted > 0 {
		s.decodes++
	}
}

// slotStats is a consistent copy of the table.
type slotStats struct {
	busy                            []bool
	processing, deferred, streams   int
	promptTokens, predicted, decode int
}

func (s *slotTable) stats() slotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := slotStats{busy: append([]bool(nil), s.busy...), deferred: s.deferred,
		streams: s.streams, promptTokens: s.prompt, predicted: s.predicted, decode: s.decodes}
	for _, b := range s.busy {
		if b {
			st.processing++
		}
	}
	return st
}
