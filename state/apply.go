package state

import (
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// Apply implements Store. It runs cmd in one memdb write transaction and
// commits only if the whole command succeeded.
func (s *MemStore) Apply(index uint64, cmd Command) (Result, error) {
	if isNil(cmd) {
		return Result{}, fmt.Errorf("%w: apply a nil command", csi.ErrInvalidRequest)
	}
	if index == 0 {
		return Result{}, fmt.Errorf("%w: apply %s at index 0; log indexes start at 1", csi.ErrInvalidRequest, cmd.Kind())
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if index < s.last {
		return Result{}, fmt.Errorf("%w: apply %s at index %d, below the store's last write at %d; apply commands in log order",
			csi.ErrInvalidRequest, cmd.Kind(), index, s.last)
	}
	gen := s.gen.Load()
	txn := gen.db.Txn(true)
	defer txn.Abort() // no-op after Commit
	w := &writer{txn: txn, index: index}
	if err := cmd.apply(w); err != nil {
		return Result{}, err
	}
	if err := w.finishPlugins(); err != nil {
		return Result{}, err
	}
	res := Result{Index: index, Claim: w.claim, Attachment: w.attachment}
	if w.touched == ([numTables]bool{}) {
		return res, nil
	}
	txn.Commit()
	s.last = index
	// After the commit: a reader that sees a new mark sees the write.
	for slot, moved := range w.touched {
		if moved {
			gen.move(slot, index)
		}
	}
	if w.past {
		gen.move(pastSlot, index)
	}
	res.Changed = true
	return res, nil
}

// writer is one command's write transaction.
type writer struct {
	txn     *memdb.Txn
	index   uint64
	touched [numTables]bool // by tableSlot
	// plugins collects, per plugin ID, what the command changed about
	// its instances and allocations; finishPlugins writes the plugin rows.
	plugins    map[string]*pluginChange
	claim      *csi.Claim
	attachment *csi.Attachment
	// past: the command wrote or removed a volume that holds past
	// claims before or after it (PastClaimsIndex moves).
	past bool
}

func (w *writer) insert(table string, obj any) error {
	if err := put(w.txn, table, obj); err != nil {
		return dbErr("write "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

func (w *writer) delete(table string, obj any) error {
	if err := remove(w.txn, table, obj); err != nil {
		return dbErr("delete from "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

func (b Batch) apply(w *writer) error {
	for i, c := range b.Commands {
		if isNil(c) {
			return fmt.Errorf("%w: batch command %d is nil", csi.ErrInvalidRequest, i)
		}
		if isBatch(c) {
			return fmt.Errorf("batch command %d: %w", i, errNestedBatch)
		}
		if err := c.apply(w); err != nil {
			return fmt.Errorf("batch command %d (%s): %w", i, c.Kind(), err)
		}
		// The next command must see the plugins as this one left them.
		if err := w.finishPlugins(); err != nil {
			return err
		}
	}
	w.claim, w.attachment = nil, nil
	return nil
}

func volName(ns, id string) string { return ns + "/" + id }

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return m
}

func nilIfEmptySlice[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
