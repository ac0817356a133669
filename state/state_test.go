package state_test

import (
	"context"
	"io"
	"testing"

	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/statetest"
)

func newMemStore(t testing.TB) *state.MemStore {
	t.Helper()
	s, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatalf("NewMemStore: %v", err)
	}
	return s
}

func TestMemStore_Conformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) state.Store { return newMemStore(t) })
}

// checkedStore is a MemStore that checks, after every write and
// restore, that every index holds exactly what its rows make.
type checkedStore struct {
	*state.MemStore
	t *testing.T
}

func (s checkedStore) Apply(index uint64, cmd state.Command) (state.Result, error) {
	res, err := s.MemStore.Apply(index, cmd)
	if cerr := s.CheckIndexes(); cerr != nil {
		s.t.Errorf("after %s at %d (%v): %v", cmd.Kind(), index, err, cerr)
	}
	return res, err
}

func (s checkedStore) Restore(ctx context.Context, r io.Reader) error {
	err := s.MemStore.Restore(ctx, r)
	if cerr := s.CheckIndexes(); cerr != nil {
		s.t.Errorf("after Restore (%v): %v", err, cerr)
	}
	return err
}

// TestMemStore_Conformance_Indexes runs the conformance suite, property
// test included, on a store whose indexes are recomputed from its rows
// and compared after every command.
func TestMemStore_Conformance_Indexes(t *testing.T) {
	statetest.Run(t, func(t *testing.T) state.Store { return checkedStore{MemStore: newMemStore(t), t: t} })
}
