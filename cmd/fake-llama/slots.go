package main

import (
	"context"
	"strings"
	"sync"
)

// slotTable is the head's n parallel slots: a request takes a free slot or waits
// (deferred) until one frees, as llama-server does with --parallel (fact 16).
//
// Its counters move as real llama-server's do (measured 2026-11-23, Q7):
// n_decode_total by one per prompt batch and one per generated token (one
// llama_decode each), while prompt_tokens_total and tokens_predicted_total
// move only when a request ends, by that request's counts (real flushes a
// slot's stats when it is released, also for a cancelled request).
type slotTable struct {
	free chan int
	// released is closed (and replaced) each time a slot is put back, for
	// those waiting for one slot in particular (takeID).
	released chan struct{}

	mu        sync.Mutex
	slots     []slotState
	deferred  int
	streams   int
	predicted int
	prompt    int
	decodes   int
	tasks     int
}

// slotState is one slot as /slots shows it.
type slotState struct {
	busy     bool
	task     int // id_task, -1 when idle
	nPrompt  int // prompt tokens, once the prompt batch is decoded
	nDecoded int // tokens generated so far
	nRemain  int // tokens still to generate, -1 when idle
	// prompt is the text of its last prompt and cached the tokens its KV
	// cache holds (that prompt and what was generated): kept while idle, as
	// real's /slots shows them, saved and restored (slotsave.go).
	prompt string
	cached int
}

var idleSlot = slotState{task: -1, nRemain: -1}

func newSlotTable(n int) *slotTable {
	s := &slotTable{free: make(chan int, n), slots: make([]slotState, n), released: make(chan struct{})}
	for i := 0; i < n; i++ {
		s.slots[i] = idleSlot
		s.free <- i
	}
	return s
}

// acquire takes a slot, counting the request as deferred while it waits.
func (s *slotTable) acquire(ctx context.Context) (int, error) {
	select {
	case id := <-s.free:
		s.take(id)
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
		s.take(id)
		return id, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// acquirePinned takes the slot id names (id_slot), or any when it names
// none (nil or -1); an id past the slots wraps around, as real's
// get_slot_by_id does (server-context.cpp:1416).
func (s *slotTable) acquirePinned(ctx context.Context, id *int) (int, error) {
	if id == nil || *id < 0 {
		return s.acquire(ctx)
	}
	n := *id % len(s.slots)
	if !s.takeID(ctx, n) {
		return 0, ctx.Err()
	}
	s.take(n)
	return n, nil
}

func (s *slotTable) take(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.slots[id]
	s.slots[id] = slotState{busy: true, task: s.tasks, nRemain: -1, prompt: prev.prompt, cached: prev.cached}
	s.tasks++
}

// takeID takes slot id itself, waiting until it is free: for a request
// pinned to it (id_slot) or a slot action (hold). false when there is no
// such slot or ctx ended.
func (s *slotTable) takeID(ctx context.Context, id int) bool {
	if id < 0 {
		return false
	}
	id %= len(s.slots)
	for {
		s.mu.Lock()
		wait, found := s.released, false
		for n := len(s.free); n > 0; n-- {
			got := <-s.free
			if got == id {
				found = true
				continue
			}
			s.free <- got
		}
		s.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
}

// holdIdle takes slot id out of service for an action once it is idle
// (real defers an action on a busy slot); unhold gives it back.
// An id past the slots wraps around, as for a request.
func (s *slotTable) holdIdle(ctx context.Context, id int) (slotState, bool) {
	if !s.takeID(ctx, id) {
		return slotState{}, false
	}
	id %= len(s.slots)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[id], true
}

func (s *slotTable) unhold(id int) {
	s.free <- id
	s.signal()
}

// signal wakes those waiting in takeID.
func (s *slotTable) signal() {
	s.mu.Lock()
	close(s.released)
	s.released = make(chan struct{})
	s.mu.Unlock()
}

// restored sets a held slot's cache (a restore; "" and 0 clear it).
func (s *slotTable) restored(id int, prompt string, tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots[id].prompt, s.slots[id].cached = prompt, tokens
}

// prompted records the decode of a request's prompt batch (one
// llama_decode) and returns how many of its tokens were evaluated: with
// the slot's cache holding a prompt this one begins with, only the rest
// (at least one), as real's cache_prompt does.
func (s *slotTable) prompted(id, promptTokens, toGenerate int, text string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decodes++
	sl := &s.slots[id]
	evaluated := promptTokens
	if sl.prompt != "" && strings.HasPrefix(text, sl.prompt) {
		evaluated = max(promptTokens-sl.cached, 1)
	}
	sl.nPrompt, sl.nRemain, sl.prompt = promptTokens, toGenerate, text
	return evaluated
}

// decoded records one generated token: one llama_decode.
func (s *slotTable) decoded(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decodes++
	s.slots[id].nDecoded++
	s.slots[id].nRemain--
}

// release ends the slot's request: only now do its prompt and generated
// tokens reach the counters, as in real llama-server (Q7).
func (s *slotTable) release(id int) {
	s.mu.Lock()
	s.prompt += s.slots[id].nPrompt
	s.predicted += s.slots[id].nDecoded
	done := s.slots[id]
	s.slots[id] = idleSlot
	s.slots[id].prompt, s.slots[id].cached = done.prompt, done.nPrompt+done.nDecoded
	s.mu.Unlock()
	s.free <- id
	s.signal()
}

// addStream counts streamed completions in flight (+1 at start, -1 at end).
func (s *slotTable) addStream(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams += delta
}

// slotStats is a consistent copy of the table.
type slotStats struct {
	slots                           []slotState
	processing, deferred, streams   int
	promptTokens, predicted, decode int
}

func (s *slotTable) stats() slotStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := slotStats{slots: append([]slotState(nil), s.slots...), deferred: s.deferred,
		streams: s.streams, promptTokens: s.prompt, predicted: s.predicted, decode: s.decodes}
	for _, sl := range s.slots {
		if sl.busy {
			st.processing++
		}
	}
	return st
}
