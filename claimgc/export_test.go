package claimgc

import (
	"fmt"
	"time"
)

// DebugState describes the queue of the current enabled period, for
// test failure messages.
func (w *Worker) DebugState() string {
	w.mu.Lock()
	q, en, since, disables := w.ep, w.enabled, w.epSince, w.disables
	w.mu.Unlock()
	if q == nil {
		return fmt.Sprintf("enabled %t, no queue, disables %d", en, disables)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var top string
	if len(q.timers) > 0 {
		top = q.timers[0].due.String()
	}
	return fmt.Sprintf("enabled %t, epoch since %d, disables %d; now %s; lastScanned %d force %t scanning %t nextScan %s; ready %d running %d waiting %d timers %d top %s",
		en, since, disables, q.clock.Now(), q.lastScanned, q.force, q.scanning, q.nextScan, q.ready.len(), q.running, q.waiting, len(q.timers), top)
}

// NextScan returns when the next forced scan of the current enabled
// period is due (the backstop, or a retry after a failed read); the zero
// time when the Worker has no queue.
func (w *Worker) NextScan() time.Time {
	w.mu.Lock()
	q := w.ep
	w.mu.Unlock()
	if q == nil {
		return time.Time{}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nextScan
}
