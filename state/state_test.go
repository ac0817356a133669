package state_test

import (
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
