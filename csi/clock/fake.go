package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a manually driven Clock for tests. Time moves only when Advance
// or Set is called; a timer fires when time reaches its deadline. The zero
// value is not usable; call NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the timer set changes
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.fired = true
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// Advance moves time forward by d and fires every timer now due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves time to t (never backwards) and fires every timer now due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

// setLocked is Set with f.mu held, so that Advance and AdvanceToNext read
// the time and move it in one step.
func (f *Fake) setLocked(t time.Time) {
	if t.After(f.now) {
		f.now = t
	}
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if !tm.at.After(f.now) {
			tm.fired = true
			tm.c <- f.now
			continue
		}
		kept = append(kept, tm)
	}
	for i := len(kept); i < len(f.timers); i++ {
		f.timers[i] = nil
	}
	f.timers = kept
	f.notifyLocked()
}

// Waiters returns how many timers are pending.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns the deadline of the earliest pending timer and true, or
// false when none is pending.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nextLocked()
}

func (f *Fake) nextLocked() (time.Time, bool) {
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	next := f.timers[0].at
	for _, t := range f.timers[1:] {
		if t.at.Before(next) {
			next = t.at
		}
	}
	return next, true
}

// AdvanceToNext moves time to the earliest pending timer's deadline, firing
// it, and returns how far time moved; 0 when no timer is pending.
func (f *Fake) AdvanceToNext() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	next, ok := f.nextLocked()
	if !ok {
		return 0
	}
	d := next.Sub(f.now)
	f.setLocked(next)
	return d
}

// BlockUntil waits until at least n timers are pending, or ctx ends. Tests
// use it to know the code under test is parked on its clock before they
// call Advance.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f     *Fake
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.notifyLocked()
			return true
		}
	}
	return false
}
