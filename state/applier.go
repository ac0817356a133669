package state

import (
	"context"
	"sync"
)

// Applier is how server-side csikit code writes: it hands a command to
// the host, which orders it and applies it to the store. Everything that
// writes (the claim flow, the claim release worker, fingerprint intake)
// goes through an Applier, never through Store.Apply directly.
//
// A single-process host uses LocalApplier. A replicated host (for
// example one on hashicorp/raft) implements Apply by encoding the command
// with EncodeCommand, appending it to its log, and, once committed,
// returning what its state machine got from store.Apply(index, cmd) at
// that log index; every replica's state machine decodes the entry with
// DecodeCommand and calls store.Apply(entryIndex, cmd) on its own store,
// so all replicas reach the same state.
//
// Apply is called from many goroutines at once. When it returns without
// error the command has been applied to the local store at Result.Index,
// so a read (or a Wait for that index) sees it. An error matching a csi
// sentinel is the command's own refusal; any other error (lost
// leadership, ctx ended) says nothing about whether the command was
// applied, and csi.Classify treats ctx errors as Uncertain.
type Applier interface {
	Apply(ctx context.Context, cmd Command) (Result, error)
}

// LocalApplier applies commands straight to a store, handing out
// increasing log indexes: the Applier of a single-process host.
type LocalApplier struct {
	store Store
	mu    sync.Mutex // orders index assignment with application
}

var _ Applier = (*LocalApplier)(nil)

// NewLocalApplier returns an Applier writing to store.
func NewLocalApplier(store Store) *LocalApplier {
	return &LocalApplier{store: store}
}

// Apply implements Applier. It applies cmd at one past the store's
// highest table index, so it keeps working after the store is restored
// from a snapshot.
func (a *LocalApplier) Apply(ctx context.Context, cmd Command) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ls, ok := a.store.(lastIndexer); ok {
		// One lock instead of a read transaction per table.
		return a.store.Apply(ls.LastIndex()+1, cmd)
	}
	var last uint64
	for _, t := range Tables() {
		idx, err := a.store.Index(t)
		if err != nil {
			return Result{}, err
		}
		last = max(last, idx)
	}
	return a.store.Apply(last+1, cmd)
}

// lastIndexer is a Store that knows its highest table index, as
// MemStore.LastIndex does.
type lastIndexer interface {
	LastIndex() uint64
}
