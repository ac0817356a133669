package claimgc

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
)

// volKey identifies a volume: releases are serialized per key.
type volKey struct{ namespace, id string }

// entryState is where a volume stands in the queue.
type entryState int

const (
	// stateReady: in the FIFO, waiting for a free worker slot.
	stateReady entryState = iota
	// stateRunning: a worker is releasing its claims.
	stateRunning
	// stateWaiting: a step failed; it runs again at due.
	stateWaiting
	// stateParked: its remaining claims wait for the volume to change
	// (a live claim on the same node); it runs again when a scan shows
	// a ModifyIndex other than index.
	stateParked
)

// entry is the queue's record of one volume.
type entry struct {
	key   volKey
	state entryState
	// due is when a waiting entry runs again.
	due time.Time
	// index is the volume's ModifyIndex as of the end of the last run:
	// a scan showing the same index brings nothing new.
	index uint64
	// seen is the highest ModifyIndex a scan offered while running.
	seen uint64
	// attempts counts consecutive runs that ended with a failure.
	attempts int
}

// outcomeKind is how a run ended.
type outcomeKind int

const (
	// outcomeDone: no past claim left (or no volume).
	outcomeDone outcomeKind = iota
	// outcomeParked: the remaining claims wait for a volume change.
	outcomeParked
	// outcomeRetry: a step failed; run again after delay.
	outcomeRetry
	// outcomeAborted: the worker is stopping; the entry is dropped with
	// the rest of the queue.
	outcomeAborted
)

type outcome struct {
	kind  outcomeKind
	index uint64        // done, parked: the volume's ModifyIndex covered by this run
	final bool          // retry: only Final errors (slow schedule)
	delay time.Duration // retry: set by the queue from attempts when 0
}

// queue is the scheduling state of one enabled period (an epoch). Every
// field is guarded by mu; changed is closed and replaced on every change
// so that waiters (workers, the scanner, the timer loop, Settle) can
// select on it together with their ctx.
type queue struct {
	clock clock.Clock
	obs   Observer

	mu      sync.Mutex
	changed chan struct{}
	entries map[volKey]*entry
	ready   fifo
	running int
	waiting int
	timers  dueHeap

	// The scanner's state.
	dirty       bool   // the volume table changed since the last scan
	force       bool   // a scan is due regardless (start, backstop, scan error)
	scanning    bool   // a scan is in progress
	lastScanned uint64 // volume table index read before the last scan's data
	nextScan    time.Time

	// timerWake tells the timer loop that the earliest deadline may have
	// moved; it holds at most one pending signal.
	timerWake chan struct{}
}

func newQueue(c clock.Clock, obs Observer, scanInterval time.Duration) *queue {
	return &queue{
		clock:     c,
		obs:       obs,
		changed:   make(chan struct{}),
		entries:   map[volKey]*entry{},
		force:     true, // scan everything at once: work may have been dropped by a previous leader
		nextScan:  c.Now().Add(scanInterval),
		timerWake: make(chan struct{}, 1),
	}
}

// notifyLocked wakes every waiter and reports the queue depth.
func (q *queue) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
	q.obs.QueueChanged(q.ready.len(), q.running, q.waiting)
}

func (q *queue) wakeTimer() {
	select {
	case q.timerWake <- struct{}{}:
	default:
	}
}

// offer takes the result of a scan: the volumes with past claims, listed
// after the volume table was at index.
func (q *queue) offer(vols []state.VolumeStamp, index uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	inScan := make(map[volKey]struct{}, len(vols))
	for _, v := range vols {
		k := volKey{v.Namespace, v.ID}
		inScan[k] = struct{}{}
		e := q.entries[k]
		switch {
		case e == nil:
			e = &entry{key: k}
			q.entries[k] = e
			q.pushReadyLocked(e)
		case e.state == stateRunning:
			e.seen = max(e.seen, v.ModifyIndex)
		case e.state == stateParked && v.ModifyIndex > e.index:
			q.pushReadyLocked(e)
		}
	}
	// A parked volume that no longer has past claims was freed or
	// deregistered by someone else: forget it.
	for k, e := range q.entries {
		if _, ok := inScan[k]; !ok && e.state == stateParked {
			delete(q.entries, k)
		}
	}
	q.scanning = false
	q.lastScanned = index
	q.notifyLocked()
}

// scanFailed ends a scan that could not read the store; the scan is
// retried at retryAt.
func (q *queue) scanFailed(retryAt time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.scanning = false
	if retryAt.Before(q.nextScan) {
		q.nextScan = retryAt
	}
	q.notifyLocked()
	q.wakeTimer()
}

func (q *queue) pushReadyLocked(e *entry) {
	e.state = stateReady
	q.ready.push(e)
}

// storeChanged records that the volume table moved.
func (q *queue) storeChanged() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dirty = true
	q.notifyLocked()
}

// waitScan blocks until a scan should run: the store changed (or a scan
// is forced) and no volume is waiting for a worker slot. Scanning while
// the ready queue is non-empty would only find work that waits behind
// it, at the cost of listing every volume with past claims, so the
// scanner lets the workers drain the queue first. It returns false when
// ctx ends.
func (q *queue) waitScan(ctx context.Context) bool {
	for {
		q.mu.Lock()
		if (q.dirty || q.force) && q.ready.len() == 0 {
			q.dirty, q.force, q.scanning = false, false, true
			q.mu.Unlock()
			return true
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// pop blocks until a volume is ready and marks it running. It returns
// false when ctx ends.
func (q *queue) pop(ctx context.Context) (*entry, bool) {
	for {
		q.mu.Lock()
		if e := q.ready.pop(); e != nil {
			e.state = stateRunning
			e.seen = 0
			q.running++
			q.notifyLocked()
			q.mu.Unlock()
			return e, true
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false
		case <-ch:
		}
	}
}

// finish ends a run of e with its outcome. delayFor computes the retry
// delay from the attempt count.
func (q *queue) finish(e *entry, o outcome, delayFor func(attempts int, final bool) time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	switch o.kind {
	case outcomeAborted:
		delete(q.entries, e.key)
	case outcomeDone:
		e.attempts = 0
		if e.seen > o.index {
			// A scan during the run saw a change the run may not have.
			q.pushReadyLocked(e)
		} else {
			delete(q.entries, e.key)
		}
	case outcomeParked:
		e.attempts = 0
		e.index = o.index
		if e.seen > o.index {
			q.pushReadyLocked(e)
		} else {
			e.state = stateParked
		}
	case outcomeRetry:
		e.attempts++
		e.state = stateWaiting
		e.due = q.clock.Now().Add(delayFor(e.attempts, o.final))
		q.waiting++
		heap.Push(&q.timers, timerItem{due: e.due, e: e})
		q.wakeTimer()
	}
	q.notifyLocked()
}

// nextDeadline returns the earliest time the timer loop must act at.
func (q *queue) nextDeadline() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := q.nextScan
	if len(q.timers) > 0 && q.timers[0].due.Before(next) {
		next = q.timers[0].due
	}
	return next
}

// fire moves every waiting volume whose time has come to the ready
// queue, and forces a scan when the backstop is due.
func (q *queue) fire(scanInterval time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	changed := false
	for len(q.timers) > 0 && !q.timers[0].due.After(now) {
		it := heap.Pop(&q.timers).(timerItem)
		if it.e.state == stateWaiting && it.e.due.Equal(it.due) {
			q.waiting--
			q.pushReadyLocked(it.e)
			changed = true
		}
	}
	if !q.nextScan.After(now) {
		q.force = true
		q.nextScan = now.Add(scanInterval)
		changed = true
	}
	if changed {
		q.notifyLocked()
	}
}

// settled reports whether the queue has nothing left to do now: the
// scanner has read the store at or past target, no scan is due, no
// volume is ready or running, and no retry is due.
func (q *queue) settled(target uint64) (bool, <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	ok := q.lastScanned >= target && !q.force && !q.scanning &&
		q.ready.len() == 0 && q.running == 0 &&
		q.nextScan.After(now) &&
		(len(q.timers) == 0 || q.timers[0].due.After(now))
	return ok, q.changed
}

// depth returns the number of volumes ready, running, waiting for a
// retry, and parked until their volume changes.
func (q *queue) depth() (ready, running, waiting, parked int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	parked = len(q.entries) - q.ready.len() - q.running - q.waiting
	return q.ready.len(), q.running, q.waiting, parked
}

// fifo is a queue of entries in arrival order.
type fifo struct {
	items []*entry
	head  int
}

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) push(e *entry) { f.items = append(f.items, e) }

func (f *fifo) pop() *entry {
	if f.head == len(f.items) {
		return nil
	}
	e := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	return e
}

// timerItem is a retry deadline. Items are never removed early: one
// whose entry has moved on (another state or deadline) is skipped when
// it comes due.
type timerItem struct {
	due time.Time
	e   *entry
}

type dueHeap []timerItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(timerItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = timerItem{}
	*h = old[:len(old)-1]
	return it
}
