// Package clock is the time a supervisor decides by: Now, timers and
// tickers behind one interface, so that the runner's and the job's
// decisions run on the real clock in production and on a fake one that
// tests advance by hand (Fake), exactly and in milliseconds of real time.
//
// It only tells time; it decides nothing.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers and tickers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer behind an interface.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real is the system clock. The zero value is ready to use.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a running time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker returns a running time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time   { return t.t.C }
func (t realTicker) Stop()                 { t.t.Stop() }
func (t realTicker) Reset(d time.Duration) { t.t.Reset(d) }

// Fake is a clock that moves only when Advance is called. Timers and
// tickers fire (a value on their channel, which holds one, as the real
// ones do: a tick nobody read is dropped) when Advance passes their time.
// It is safe for concurrent use. Build it with NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
	// changed is closed and replaced whenever a timer or ticker is armed,
	// so tests can wait until the code under test has armed its next one.
	changed chan struct{}
}

// NewFake returns a fake clock standing at now.
func NewFake(now time.Time) *Fake { return &Fake{now: now, changed: make(chan struct{})} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock by d, firing every timer and ticker whose time
// comes on the way, in time order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		w := f.next(end)
		if w == nil {
			break
		}
		f.now = w.at
		w.fire()
	}
	f.now = end
	f.mu.Unlock()
}

// next returns the armed waiter due first, at or before end; nil if none.
func (f *Fake) next(end time.Time) *fakeWaiter {
	var first *fakeWaiter
	for _, w := range f.waiters {
		if w.armed && !w.at.After(end) && (first == nil || w.at.Before(first.at)) {
			first = w
		}
	}
	return first
}

// Armed returns a channel closed the next time a timer or ticker is armed
// or reset: a test advances the clock after the code under test has set
// what it waits on.
func (f *Fake) Armed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// Waiters returns how many timers and tickers are armed.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if w.armed {
			n++
		}
	}
	return n
}

// NewTimer returns a timer that fires once, d from now.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, 0) }

// Unread counts the ticks fired and not yet received: tests wait for them
// to be taken before they advance the clock again.
func (f *Fake) Unread() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		n += len(w.c)
	}
	return n
}

// NewTicker returns a ticker that fires every d.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(d, d)}
}

func (f *Fake) add(d, period time.Duration) *fakeWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{f: f, c: make(chan time.Time, 1), period: period}
	f.waiters = append(f.waiters, w)
	w.arm(d)
	return w
}

// fakeWaiter is a Fake's timer or ticker (period > 0).
type fakeWaiter struct {
	f      *Fake
	c      chan time.Time
	at     time.Time
	period time.Duration
	armed  bool
}

// arm sets the waiter to fire d after now; f.mu is held.
func (w *fakeWaiter) arm(d time.Duration) {
	w.at, w.armed = w.f.now.Add(d), true
	close(w.f.changed)
	w.f.changed = make(chan struct{})
}

// fire delivers a tick (dropped if the last one was not read) and re-arms
// a ticker; f.mu is held.
func (w *fakeWaiter) fire() {
	select {
	case w.c <- w.at:
	default:
	}
	if w.period > 0 {
		w.at = w.at.Add(w.period)
		return
	}
	w.armed = false
}

func (w *fakeWaiter) C() <-chan time.Time { return w.c }

// Stop disarms the waiter; it reports whether it was armed.
func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := w.armed
	w.armed = false
	return was
}

// Reset re-arms the waiter d from now (a ticker's period becomes d).
func (w *fakeWaiter) Reset(d time.Duration) bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	was := w.armed
	if w.period > 0 {
		w.period = d
	}
	w.arm(d)
	return was
}

// fakeTicker adapts a waiter to the Ticker interface (no results).
type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time   { return t.w.c }
func (t fakeTicker) Stop()                 { t.w.Stop() }
func (t fakeTicker) Reset(d time.Duration) { t.w.Reset(d) }
