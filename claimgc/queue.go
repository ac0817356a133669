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
)

// entry is the queue's record of one volume.
type entry struct {
	key   volKey
	state entryState
	// due is when a waiting entry runs again.
	due time.Time
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
	// outcomeRetry: a step failed; run again after the backoff the queue
	// computes from the attempts (or the slow schedule for Final errors).
	outcomeRetry
	// outcomeAborted: the worker is stopping; the entry is dropped with
	// the rest of the queue.
	outcomeAborted
)

type outcome struct {
	kind  outcomeKind
	index uint64 // done: the volume's ModifyIndex covered by this run
	final bool   // retry: only Final errors (slow schedule)
}

// queue is the scheduling state of one enabled period (an epoch). Every
// field is guarded by mu; changed is closed and replaced on every change
// so that waiters (workers, the scanner, the timer loop, Settle) can
// select on it together with their ctx.
type queue struct {
	clock clock.Clock
	obs   Observer
	slots int // Config.Parallelism: volumes released at once

	mu      sync.Mutex
	changed chan struct{}
	entries map[volKey]*entry
	ready   fifo
	running int
	waiting int
	timers  dueHeap
	// reported is the depth last passed to obs.QueueChanged; none at
	// first, so that a new epoch reports its depth at once.
	reported [3]int

	// idle holds one channel per worker waiting in pop, oldest first; a
	// volume that becomes ready closes one, so that a change wakes one
	// worker rather than all of them.
	idle []chan struct{}

	// The scanner's state.
	force       bool   // a scan is due regardless (start, backstop, scan error)
	scanning    bool   // a scan is in progress
	lastScanned uint64 // past claims index (Worker.past) read before the last scan's data
	nextScan    time.Time
	// gate is closed and replaced when a scan may have become possible:
	// a worker slot freed, the ready queue drained, or a scan forced.
	gate chan struct{}
	// stopWatch, while the scanner waits for the store, ends that wait:
	// a forced scan does not wait for a store change.
	stopWatch context.CancelFunc

	// timerWake tells the timer loop that the earliest deadline may have
	// moved; it holds at most one pending signal.
	timerWake chan struct{}
}

func newQueue(c clock.Clock, obs Observer, scanInterval time.Duration, slots int) *queue {
	return &queue{
		clock:     c,
		obs:       obs,
		slots:     slots,
		changed:   make(chan struct{}),
		entries:   map[volKey]*entry{},
		force:     true, // scan everything at once: work may have been dropped by a previous leader
		nextScan:  c.Now().Add(scanInterval),
		gate:      make(chan struct{}),
		timerWake: make(chan struct{}, 1),
		reported:  [3]int{-1, -1, -1},
	}
}

// notifyLocked wakes every waiter and reports the queue depth if it
// changed.
func (q *queue) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
	if depth := [3]int{q.ready.len(), q.running, q.waiting}; depth != q.reported {
		q.reported = depth
		q.obs.QueueChanged(depth[0], depth[1], depth[2])
	}
}

// openGateLocked wakes the scanner if it waits for a chance to scan.
func (q *queue) openGateLocked() {
	close(q.gate)
	q.gate = make(chan struct{})
}

// canScanLocked reports whether a scan could start now: no volume is
// waiting for a worker slot, and a slot is free. A scan while every
// slot is busy would only find work that waits behind the running
// volumes (and the running volumes' own writes would make the scanner
// list every volume with past claims once per write); a scan while the
// ready queue is not empty would only find work that waits behind it.
// Either way the scanner waits, and scans once, when it can matter.
func (q *queue) canScanLocked() bool {
	return q.ready.len() == 0 && q.running < q.slots
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
	for _, v := range vols {
		k := volKey{v.Namespace, v.ID}
		switch e := q.entries[k]; {
		case e == nil:
			e = &entry{key: k}
			q.entries[k] = e
			q.pushReadyLocked(e)
		case e.state == stateRunning:
			e.seen = max(e.seen, v.ModifyIndex)
		}
	}
	q.scanning = false
	q.lastScanned = index
	q.notifyLocked()
}

// scanFailed ends a scan that could not read the store; a scan is
// forced at retryAt.
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

// watchFailed records that waiting for a store change failed; a scan is
// forced at retryAt, and the scanner waits for it.
func (q *queue) watchFailed(retryAt time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if retryAt.Before(q.nextScan) {
		q.nextScan = retryAt
	}
	q.wakeTimer()
}

func (q *queue) pushReadyLocked(e *entry) {
	e.state = stateReady
	q.ready.push(e)
	if len(q.idle) > 0 {
		close(q.idle[0])
		q.idle = q.idle[1:]
	}
}

// waitScan blocks until a scan can start (see canScanLocked) and, when
// forced is true, one is forced (the backstop, a retry after a failed
// read). It returns whether a scan is forced, and false when ctx ends.
func (q *queue) waitScan(ctx context.Context, forced bool) (force, ok bool) {
	for {
		q.mu.Lock()
		if q.canScanLocked() && (q.force || !forced) {
			force = q.force
			q.mu.Unlock()
			return force, true
		}
		ch := q.gate
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return false, false
		case <-ch:
		}
	}
}

// canScan reports whether a scan can start now (see canScanLocked).
func (q *queue) canScan() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.canScanLocked()
}

// watchContext returns the context of one wait for a store change: it
// ends with ctx, or when a scan is forced (stopWatch). since is the
// volume table index the last scan read.
func (q *queue) watchContext(ctx context.Context) (wctx context.Context, since uint64, done func()) {
	wctx, cancel := context.WithCancel(ctx)
	q.mu.Lock()
	if q.force {
		cancel()
	}
	q.stopWatch = cancel
	since = q.lastScanned
	q.mu.Unlock()
	return wctx, since, func() {
		q.mu.Lock()
		q.stopWatch = nil
		q.mu.Unlock()
		cancel()
	}
}

// beginScan marks a scan as started: it covers any forced one.
func (q *queue) beginScan() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.force, q.scanning = false, true
}

// forceScanLocked makes a scan due now.
func (q *queue) forceScanLocked() {
	q.force = true
	if q.stopWatch != nil {
		q.stopWatch()
	}
	q.openGateLocked()
}

// pop blocks until a volume is ready and marks it running. It returns
// false when ctx ends. A worker waiting here is woken by the volume
// that becomes ready for it, not by every change of the queue.
func (q *queue) pop(ctx context.Context) (*entry, bool) {
	for {
		q.mu.Lock()
		if e := q.ready.pop(); e != nil {
			e.state = stateRunning
			e.seen = 0
			q.running++
			if q.canScanLocked() {
				q.openGateLocked()
			}
			q.notifyLocked()
			q.mu.Unlock()
			return e, true
		}
		turn := make(chan struct{})
		q.idle = append(q.idle, turn)
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false
		case <-turn:
		}
	}
}

// finish ends a run of e with its outcome. delayFor computes the retry
// delay from the attempt count.
func (q *queue) finish(e *entry, o outcome, delayFor func(attempts int, final bool) time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	defer func() {
		if q.canScanLocked() {
			q.openGateLocked()
		}
	}()
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
		q.forceScanLocked()
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

// depth returns the number of volumes ready, running and waiting for a
// retry.
func (q *queue) depth() (ready, running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.len(), q.running, q.waiting
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
