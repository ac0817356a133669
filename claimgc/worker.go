package claimgc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
)

// Worker releases past claims: for each volume with past claims it runs
// the node step, the controller step and the free of every claim,
// checkpointing after each step through the Applier. See the package
// doc for the host's duties.
//
// A Worker starts disabled; only the leader enables it (SetEnabled).
// Its methods are safe for concurrent use.
type Worker struct {
	cfg Config

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when enabled, ep or run change
	enabled  bool
	disables uint64 // counts SetEnabled(false), so that a quick off-on still ends the enabled period
	run      runState
	ep       *queue // the queue of the current enabled period, or nil
	epSince  uint64 // the disable count when ep started

	freed          atomic.Uint64
	failedAttempts atomic.Uint64
	steps          [3]atomic.Uint64 // by stepIndex
	freeLatencySum atomic.Int64     // nanoseconds
	freeLatencyMax atomic.Int64
	scans          atomic.Uint64
	writes         atomic.Uint64 // commands written
	applies        atomic.Uint64 // calls to the Applier
	// past tells when the volumes with past claims may have changed:
	// what the scanner waits for and Settle reads.
	past state.PastClaimWatcher
}

type runState int

const (
	runIdle runState = iota
	runRunning
	runStopped
)

// New validates cfg, fills its defaults and returns a disabled Worker.
// It starts no goroutine and reads nothing.
func New(cfg Config) (*Worker, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg:     c,
		changed: make(chan struct{}),
		past:    pastWatcherOf(c.Store),
	}, nil
}

// pastWatcherOf returns how the Worker watches the volumes with past
// claims: the store's own PastClaimWatcher when it has one, so that
// writes which cannot concern a release (claims, publishes, volumes
// registered) do not wake the scanner; else every write to the volume
// table.
func pastWatcherOf(r state.Reader) state.PastClaimWatcher {
	if pw, ok := r.(state.PastClaimWatcher); ok {
		return pw
	}
	return volumeTableWatcher{r}
}

// volumeTableWatcher is a PastClaimWatcher for a store without one: it
// reports every change of the volume table.
type volumeTableWatcher struct{ r state.Watcher }

func (v volumeTableWatcher) PastClaimsIndex() (uint64, error) {
	return v.r.Index(state.TableVolumes)
}

func (v volumeTableWatcher) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	return v.r.Wait(ctx, state.TableVolumes, minIndex)
}

func (w *Worker) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// SetEnabled turns releasing on (this server became the leader) or off
// (it lost leadership). It does not block. Enabling starts a scan of
// every volume with past claims, since the previous leader may have
// dropped work. Disabling cancels the steps in flight; a step whose
// call was cut short is not checkpointed and runs again, whole, on the
// next leader. Settle waits until a disabled Worker has stopped.
func (w *Worker) SetEnabled(enabled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.enabled == enabled {
		return
	}
	w.enabled = enabled
	if !enabled {
		w.disables++
	}
	w.cfg.Logger.Info("claim release worker", "enabled", enabled)
	w.notifyLocked()
}

// Enabled reports whether the Worker is enabled.
func (w *Worker) Enabled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enabled
}

// Run releases claims while the Worker is enabled, and waits while it is
// disabled, until ctx ends. It returns nil after every goroutine it
// started has stopped. A Worker runs once: a second call returns an
// error matching csi.ErrInvalidRequest.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.run != runIdle {
		w.mu.Unlock()
		return fmt.Errorf("%w: claimgc: Run was already called; a Worker runs once, build a new one with New", csi.ErrInvalidRequest)
	}
	w.run = runRunning
	w.notifyLocked()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.run = runStopped
		w.notifyLocked()
		w.mu.Unlock()
	}()
	for {
		disables, ok := w.waitEnabled(ctx)
		if !ok {
			return nil
		}
		w.runEnabled(ctx, disables)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// waitEnabled blocks until the Worker is enabled and returns the
// disable count as of then; false when ctx ends first.
func (w *Worker) waitEnabled(ctx context.Context) (uint64, bool) {
	for {
		w.mu.Lock()
		en, n, ch := w.enabled, w.disables, w.changed
		w.mu.Unlock()
		if en {
			return n, true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-ch:
		}
	}
}

// waitDisabled blocks until SetEnabled(false) is called after the
// disable count was since, or ctx ends.
func (w *Worker) waitDisabled(ctx context.Context, since uint64) {
	for {
		w.mu.Lock()
		n, ch := w.disables, w.changed
		w.mu.Unlock()
		if n != since {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// runEnabled runs one enabled period: the scanner, the timer loop and
// Parallelism workers, until the Worker is disabled (the
// disable count moves past disables) or ctx ends. It returns after all
// of them stopped.
func (w *Worker) runEnabled(parent context.Context, disables uint64) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	q := newQueue(w.cfg.Clock, w.cfg.Observer, w.cfg.ScanInterval, w.cfg.Parallelism)
	w.mu.Lock()
	w.ep, w.epSince = q, disables
	w.notifyLocked()
	w.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { w.scanLoop(ctx, q) })
	wg.Go(func() { w.timerLoop(ctx, q) })
	for range w.cfg.Parallelism {
		wg.Go(func() { w.workLoop(ctx, q) })
	}
	w.waitDisabled(ctx, disables)
	cancel()
	wg.Wait()

	w.mu.Lock()
	w.ep = nil
	w.notifyLocked()
	w.mu.Unlock()
	w.cfg.Observer.QueueChanged(0, 0, 0)
}

// scanLoop lists the volumes with past claims and hands them to the
// queue. It is also the store's watcher: between scans it blocks (no
// polling) until the volumes with past claims change past the index of
// the last scan (Worker.past), then scans from the same goroutine, so a stopped
// allocation reaches a worker in one hand-off. It scans only when a scan
// can start work (see queue.canScanLocked), when forced (the first scan
// of an enabled period, the backstop, a retry after a failed read), and
// never while the store has not moved since the last scan.
//
// The list holds keys and indexes only
// (state.VolumeReader.PastClaimVolumeIDs): a volume is read when a
// worker releases it, so a scan of a large queue does not copy every
// volume before the first release can start.
func (w *Worker) scanLoop(ctx context.Context, q *queue) {
	failures := 0
	// broken: the last wait for a store change failed; the next scan
	// waits for the retry that watchFailed scheduled.
	broken := false
	// retryAt counts a failed store read, logs it and returns when to
	// try again.
	retryAt := func(what string, err error) time.Time {
		failures++
		broken = true
		d := w.cfg.backoff().Delay(failures)
		w.cfg.Logger.Warn("claim release worker cannot "+what+"; retrying", "error", err, "retry_in", d)
		return w.cfg.Clock.Now().Add(d)
	}
	for {
		force, ok := q.waitScan(ctx, broken)
		if !ok {
			return
		}
		if !force {
			wctx, since, done := q.watchContext(ctx)
			_, err := w.past.WaitPastClaims(wctx, since)
			forced := wctx.Err() != nil
			done()
			switch {
			case ctx.Err() != nil:
				return
			case forced:
				// waitScan returns the forced scan once one can start.
				continue
			case err != nil:
				q.watchFailed(retryAt("watch the volume table", err))
				continue
			case !q.canScan():
				// The store moved, but a scan would start nothing now:
				// waitScan returns once it would, and the store's Wait
				// then returns at once.
				continue
			}
		}
		q.beginScan()
		idx, err := w.past.PastClaimsIndex()
		var vols []state.VolumeStamp
		if err == nil {
			vols, err = w.cfg.Store.PastClaimVolumeIDs()
		}
		if err != nil {
			q.scanFailed(retryAt("list volumes with past claims", err))
			continue
		}
		failures, broken = 0, false
		w.scans.Add(1)
		q.offer(vols, idx)
	}
}

// timerLoop fires retries and the backstop scan on Config.Clock. It
// holds one timer at a time, for the earliest deadline.
func (w *Worker) timerLoop(ctx context.Context, q *queue) {
	for {
		t := arm(w.cfg.Clock, q.nextDeadline())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-q.timerWake:
			t.Stop()
		case <-t.C():
		}
		q.fire(w.cfg.ScanInterval)
	}
}

// arm returns a timer that fires at deadline. A Clock takes a duration,
// so a clock that jumps between reading the time and arming the timer
// (a fake clock advanced by a test) would leave the timer late by the
// jump, possibly past the test's next step; the timer is then armed
// again from the new time. A wall clock moves by far less than the
// tolerance meanwhile.
func arm(c clock.Clock, deadline time.Time) clock.Timer {
	const tolerance = time.Millisecond
	for tries := 1; ; tries++ {
		before := c.Now()
		t := c.NewTimer(deadline.Sub(before))
		if c.Now().Sub(before) < tolerance || tries == 3 {
			return t
		}
		t.Stop()
	}
}

// workLoop releases one volume at a time from the ready queue.
func (w *Worker) workLoop(ctx context.Context, q *queue) {
	for {
		e, ok := q.pop(ctx)
		if !ok {
			return
		}
		o := w.releaseVolume(ctx, e.key)
		if ctx.Err() != nil {
			o = outcome{kind: outcomeAborted}
		}
		q.finish(e, o, w.retryDelay)
	}
}

// retryDelay is the wait before the next run of a volume that failed
// attempts times in a row.
func (w *Worker) retryDelay(attempts int, final bool) time.Duration {
	if final {
		return w.cfg.FinalRetryInterval
	}
	return w.cfg.backoff().Delay(attempts)
}

// Settle blocks until the Worker has nothing to do right now, or ctx
// ends (returning ctx.Err()). An enabled Worker has settled when it has
// read the store as of the call (so every claim released before the call
// has been seen), no volume is queued or being released, and no retry
// or backstop scan is due on Config.Clock; volumes waiting for a later
// retry, or for a change of their volume, do not count. A disabled
// Worker has settled once its in-flight steps have stopped; a Worker
// whose Run has returned has settled. An enabled Worker whose Run has
// not started yet waits for it.
//
// Settle is for tests (act, Settle, assert; advance a fake clock,
// Settle, assert) and for a host that wants to know the releases it
// triggered have been tried.
func (w *Worker) Settle(ctx context.Context) error {
	target, err := w.past.PastClaimsIndex()
	if err != nil {
		return fmt.Errorf("claimgc: settle: read the index of the volumes with past claims: %w", err)
	}
	for {
		w.mu.Lock()
		en, run, q, ch := w.enabled, w.run, w.ep, w.changed
		current := q != nil && w.epSince == w.disables // not an ending period
		w.mu.Unlock()
		var qch <-chan struct{}
		switch {
		case run == runStopped:
			return nil
		case !en && q == nil:
			return nil
		case en && current:
			ok, c := q.settled(target)
			if ok {
				return nil
			}
			qch = c
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-qch:
		}
	}
}

// Stats is a snapshot of the Worker's counters (since New) and queue
// (of the current enabled period).
type Stats struct {
	Enabled bool
	// Freed counts claims freed.
	Freed uint64
	// NodeDetached counts node steps done (RPCs made, or skipped for a
	// gone node) and checkpointed; ControllerDetached counts claims whose
	// ControllerUnpublish was made and which were then freed.
	NodeDetached       uint64
	ControllerDetached uint64
	// FailedAttempts counts failed attempts at a step.
	FailedAttempts uint64
	// Scans counts listings of the volumes with past claims.
	Scans uint64
	// Writes counts commands written (checkpoints, frees, errors);
	// Applies counts calls to the Applier: the commands of one step of
	// one volume go together in one state.Batch.
	Writes, Applies uint64
	// Ready, Running and Waiting are the volumes queued for a worker
	// slot, being released, and waiting for a retry.
	Ready, Running, Waiting int
	// FreeLatencyTotal and FreeLatencyMax sum and bound the time from
	// Claim.ReleasedAt to the free over the freed claims; divide the
	// total by Freed for the mean.
	FreeLatencyTotal time.Duration
	FreeLatencyMax   time.Duration
}

// Stats returns a snapshot of the counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	en, q := w.enabled, w.ep
	w.mu.Unlock()
	s := Stats{
		Enabled:            en,
		Freed:              w.freed.Load(),
		NodeDetached:       w.steps[stepIndex(StepNodeDetach)].Load(),
		ControllerDetached: w.steps[stepIndex(StepControllerDetach)].Load(),
		FailedAttempts:     w.failedAttempts.Load(),
		Scans:              w.scans.Load(),
		Writes:             w.writes.Load(),
		Applies:            w.applies.Load(),
		FreeLatencyTotal:   time.Duration(w.freeLatencySum.Load()),
		FreeLatencyMax:     time.Duration(w.freeLatencyMax.Load()),
	}
	if q != nil {
		s.Ready, s.Running, s.Waiting = q.depth()
	}
	return s
}

func stepIndex(s Step) int {
	switch s {
	case StepNodeDetach:
		return 0
	case StepControllerDetach:
		return 1
	}
	return 2
}
