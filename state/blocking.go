package state

import (
	"context"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
)

func validTable(t Table) error {
	if !slices.Contains(Tables(), t) {
		return fmt.Errorf("%w: unknown table %q; use one of %v", csi.ErrInvalidRequest, t, Tables())
	}
	return nil
}

// Index implements Watcher.
func (s *MemStore) Index(table Table) (uint64, error) {
	if err := validTable(table); err != nil {
		return 0, err
	}
	return s.gen.Load().marks[tableSlot(table)].Load().index, nil
}

// LastIndex returns the highest index of any table: the log index of the
// last write that changed something.
func (s *MemStore) LastIndex() uint64 {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.last
}

// Wait implements Watcher. It waits on the table's mark and the current
// generation's restore channel, so it wakes on exactly the writes that
// matter and starts no goroutine.
func (s *MemStore) Wait(ctx context.Context, table Table, minIndex uint64) (uint64, error) {
	if err := validTable(table); err != nil {
		return 0, err
	}
	return s.wait(ctx, tableSlot(table), minIndex)
}

// wait blocks until the mark in slot is above minIndex, a restore
// replaces the generation (returning the new generation's mark), or
// ctx ends.
func (s *MemStore) wait(ctx context.Context, slot int, minIndex uint64) (uint64, error) {
	for {
		gen := s.gen.Load()
		m := gen.marks[slot].Load()
		if m.index > minIndex {
			return m.index, nil
		}
		select {
		case <-m.changed:
		case <-gen.replaced:
			return s.gen.Load().marks[slot].Load().index, nil
		case <-ctx.Done():
			return m.index, ctx.Err()
		}
	}
}

// PastClaimsIndex implements PastClaimWatcher.
func (s *MemStore) PastClaimsIndex() (uint64, error) {
	return s.gen.Load().marks[pastSlot].Load().index, nil
}

// WaitPastClaims implements PastClaimWatcher.
func (s *MemStore) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	return s.wait(ctx, pastSlot, minIndex)
}
