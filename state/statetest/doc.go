// Package statetest is a conformance suite for state.Store
// implementations, in the spirit of testing/fstest.TestFS.
//
// Run drives a store through the whole contract of package state in
// subtests: volume registration and reads, every claim rule, publish
// contexts, releases and checkpoints, plugin fingerprints and
// allocations, copies on read, blocking queries, atomic refusals (the
// table indexes and every read unchanged after each refused command),
// replay determinism, snapshots when the store is a state.Snapshotter,
// and a property test (pgregory.net/rapid) of random command sequences.
// Failures are reported per case with t.Errorf, so one run shows every
// broken rule, not only the first.
//
// The memdb store passes it; a host that keeps CSI state in its own
// database runs it against its implementation from a test:
//
//	func TestStore(t *testing.T) {
//		statetest.Run(t, func(t *testing.T) state.Store { return newMyStore(t) })
//	}
//
// The property test runs rapid's default number of checks (100); raise it
// with the -rapid.checks flag.
package statetest
