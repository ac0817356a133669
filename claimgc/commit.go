package claimgc

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// maxBatch bounds the commands written in one state.Batch, so that one
// log entry of a replicated host stays small (a checkpoint is a few
// hundred bytes encoded).
const maxBatch = 256

// committer sends the Worker's writes to the Applier. Commands that
// arrive while a write is in flight are grouped into one state.Batch:
// one store transaction, and one log entry on a replicated host, for
// many claims. A store pays mostly per transaction, so this is what lets
// releases keep up with many volumes in parallel. Each command is still
// submitted only after its step succeeded, and its submitter collects
// the outcome before its claim's next step, so grouping never reorders
// the writes of one volume.
//
// A write is made by the committer's own goroutine (run), woken by kick
// when a worker goes on with another step meanwhile or when several
// releases run at once (it then lets the writes of the others gather
// before it takes a batch), or by a worker that waits for its writes
// while no other release runs (flush): with no one to batch with, it
// writes them itself instead of waking the committer and waiting to be
// woken in turn. Either way one batch at a time is in flight, and
// batches go out in submission order.
type committer struct {
	ctx     context.Context // the enabled period's: every write is made under it
	applier state.Applier
	// writes and applies count commands written and Applier calls made.
	writes, applies *atomic.Uint64

	mu      sync.Mutex
	pending []*write
	busy    bool          // a batch is being written
	stopped error         // set when run returned: later writes fail with it
	wake    chan struct{} // holds one signal for run
}

type write struct {
	cmd  state.Command
	done chan error // buffered: the writer never blocks on it
}

// newCommitter returns a committer whose writes are made under ctx.
func newCommitter(ctx context.Context, a state.Applier, writes, applies *atomic.Uint64) *committer {
	return &committer{ctx: ctx, applier: a, writes: writes, applies: applies, wake: make(chan struct{}, 1)}
}

// apply writes cmd and waits for its outcome, or for ctx to end (the
// command may then still be applied: the outcome is unknown, as with
// any Applier).
func (c *committer) apply(ctx context.Context, cmd state.Command) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := c.submit(cmd)[0]
	c.flush()
	return w.wait(ctx)
}

// submit queues cmds, in order, and returns without waiting or writing:
// the caller either goes on with work that does not depend on them and
// kicks the committer, or flushes. It collects each outcome with wait.
// Commands submitted together are written in one batch (unless they
// exceed maxBatch), after every command submitted before them.
func (c *committer) submit(cmds ...state.Command) []*write {
	ws := make([]*write, len(cmds))
	for i, cmd := range cmds {
		ws[i] = &write{cmd: cmd, done: make(chan error, 1)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped != nil {
		for _, w := range ws {
			w.done <- c.stopped
		}
		return ws
	}
	c.pending = append(c.pending, ws...)
	return ws
}

// kick has the committer's goroutine write what is pending, while the
// caller goes on.
func (c *committer) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush writes what is pending from the caller's goroutine, unless a
// write is in flight: its writer takes what is pending next.
func (c *committer) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeLocked(false)
}

// writeLocked writes pending batches until none is left, unless a write
// is in flight or the committer stopped; c.mu is held, and released
// while writing. gather lets more writes arrive first (run's way).
func (c *committer) writeLocked(gather bool) {
	for !c.busy && c.stopped == nil && len(c.pending) > 0 {
		c.busy = true
		if gather {
			c.mu.Unlock()
			c.gather()
			c.mu.Lock()
		}
		n := min(len(c.pending), maxBatch)
		batch := c.pending[:n:n]
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.mu.Unlock()
		c.write(c.ctx, batch)
		c.mu.Lock()
		c.busy = false
	}
}

// wait returns the outcome of w, or ctx's error if ctx ends first (the
// command may then still be applied).
func (w *write) wait(ctx context.Context) error {
	select {
	case err := <-w.done:
		w.done <- err // keep it for a later wait
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run writes what is pending when kicked, until the committer's ctx
// ends; writes still pending then fail with ctx's error.
func (c *committer) run() {
	for {
		select {
		case <-c.ctx.Done():
			c.mu.Lock()
			c.stopped = c.ctx.Err()
			for _, w := range c.pending {
				w.done <- c.stopped
			}
			c.pending = nil
			c.mu.Unlock()
			return
		case <-c.wake:
		}
		c.mu.Lock()
		c.writeLocked(true)
		c.mu.Unlock()
	}
}

// gather lets the workers that are ready to run (their step just
// answered) reach apply before the batch is taken, yielding while that
// makes the batch grow, a few times at most: a bigger batch costs the
// store little more than a small one. It waits for no timer and no
// worker that is not already runnable.
func (c *committer) gather() {
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	for range 4 {
		runtime.Gosched()
		c.mu.Lock()
		m := len(c.pending)
		c.mu.Unlock()
		if m == n || m >= maxBatch {
			return
		}
		n = m
	}
}

// write applies one group. When the batch as a whole is refused (a csi
// sentinel: one command's own refusal, which fails every command of the
// batch), each command is applied on its own to give each its own
// answer; the Worker's commands are idempotent, so that is safe. Any
// other error (lost leadership, ctx ended) goes to every command.
func (c *committer) write(ctx context.Context, batch []*write) {
	if err := ctx.Err(); err != nil {
		// The enabled period is over: nothing more is written.
		for _, w := range batch {
			w.done <- err
		}
		return
	}
	c.writes.Add(uint64(len(batch)))
	c.applies.Add(1)
	if len(batch) == 1 {
		_, err := c.applier.Apply(ctx, batch[0].cmd)
		batch[0].done <- err
		return
	}
	cmds := make([]state.Command, 0, len(batch))
	for _, w := range batch {
		// A write that is a batch of its own (an attachment's removal
		// with its frees) joins as its commands: batches do not nest.
		if b, ok := w.cmd.(state.Batch); ok {
			cmds = append(cmds, b.Commands...)
		} else {
			cmds = append(cmds, w.cmd)
		}
	}
	_, err := c.applier.Apply(ctx, state.Batch{Commands: cmds})
	if err != nil && ctx.Err() == nil && csi.SentinelOf(err) != nil {
		c.applies.Add(uint64(len(batch)))
		for _, w := range batch {
			_, err := c.applier.Apply(ctx, w.cmd)
			w.done <- err
		}
		return
	}
	for _, w := range batch {
		w.done <- err
	}
}
