package state

import (
	"context"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
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
	_, idx, err := tableIndex(s.read(), table)
	return idx, err
}

// LastIndex returns the highest index of any table: the log index of the
// last write that changed something.
func (s *MemStore) LastIndex() uint64 {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.last
}

func tableIndex(txn *memdb.Txn, table Table) (<-chan struct{}, uint64, error) {
	ch, raw, err := txn.FirstWatch(tIndex, iID, string(table))
	if err != nil {
		return nil, 0, dbErr("read index of "+string(table), err)
	}
	if raw == nil {
		return ch, 0, nil
	}
	return ch, raw.(*indexRow).Index, nil
}

// Wait implements Watcher. It watches the table's index row (a memdb
// watch channel) and the current generation's restore channel, so it
// wakes on exactly the writes that matter and starts no goroutine.
func (s *MemStore) Wait(ctx context.Context, table Table, minIndex uint64) (uint64, error) {
	if err := validTable(table); err != nil {
		return 0, err
	}
	for {
		gen := s.gen.Load()
		ch, idx, err := tableIndex(gen.db.Txn(false), table)
		if err != nil {
			return 0, err
		}
		if idx > minIndex {
			return idx, nil
		}
		select {
		case <-ch:
		case <-gen.replaced:
			_, idx, err := tableIndex(s.read(), table)
			return idx, err
		case <-ctx.Done():
			return idx, ctx.Err()
		}
	}
}

// PastClaimsIndex implements PastClaimWatcher.
func (s *MemStore) PastClaimsIndex() (uint64, error) {
	return s.gen.Load().past.Load().index, nil
}

// WaitPastClaims implements PastClaimWatcher.
func (s *MemStore) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	for {
		gen := s.gen.Load()
		mark := gen.past.Load()
		if mark.index > minIndex {
			return mark.index, nil
		}
		select {
		case <-mark.changed:
		case <-gen.replaced:
			return s.gen.Load().past.Load().index, nil
		case <-ctx.Done():
			return mark.index, ctx.Err()
		}
	}
}
