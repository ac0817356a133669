package state

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
)

func validTable(t Table) (tableID, error) {
	id, ok := t.id()
	if !ok {
		return 0, fmt.Errorf("%w: unknown table %q; use one of %v", csi.ErrInvalidRequest, t, Tables())
	}
	return id, nil
}

// Index implements Watcher.
func (s *MemStore) Index(table Table) (uint64, error) {
	t, err := validTable(table)
	if err != nil {
		return 0, err
	}
	return s.read().index[t], nil
}

// LastIndex returns the highest index of any table: the log index of the
// last write that changed something.
func (s *MemStore) LastIndex() uint64 {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.last
}

// Wait implements Watcher. It reads the table's index and watch channel
// from one published state: a write that changes the table publishes
// its state, then closes that channel, and a restore closes the
// channel all states since the previous restore share. So Wait wakes on
// exactly the writes that matter and starts no goroutine.
func (s *MemStore) Wait(ctx context.Context, table Table, minIndex uint64) (uint64, error) {
	t, err := validTable(table)
	if err != nil {
		return 0, err
	}
	for {
		d := s.read()
		if idx := d.index[t]; idx > minIndex {
			return idx, nil
		}
		select {
		case <-d.watch[t]:
		case <-d.replaced:
			return s.read().index[t], nil
		case <-ctx.Done():
			return d.index[t], ctx.Err()
		}
	}
}
