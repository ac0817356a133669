package statetest_test

import (
	"testing"

	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/statetest"
)

// A store implementation runs the suite from one of its tests. Here the
// implementation is state.MemStore; a host would build its own store,
// empty, in the function it passes.
func ExampleRun() {
	testStore := func(t *testing.T) {
		statetest.Run(t, func(t *testing.T) state.Store {
			s, err := state.NewMemStore(state.Config{})
			if err != nil {
				t.Fatalf("NewMemStore: %v", err)
			}
			return s
		})
	}
	_ = testStore // in a _test.go file: func TestStore(t *testing.T) { testStore(t) }
}
