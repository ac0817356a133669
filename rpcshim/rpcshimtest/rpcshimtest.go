package rpcshimtest

import (
	"testing"

	"github.com/csikit/csikit/rpcshim"
)

// Harness is one Transport under test, with the means to give a node an
// endpoint and to cut a node off. The suite uses one Harness per case,
// from the case's goroutine, and never after the case ends.
type Harness struct {
	// Transport is the implementation under test. Required.
	Transport rpcshim.Transport
	// Serve makes h the endpoint of nodeID: calls to nodeID made after
	// Serve returns reach h. Required. The suite calls it at most once
	// per node ID and case.
	Serve func(t testing.TB, nodeID string, h rpcshim.Handler)
	// Down leaves nodeID, which Serve served, known to the host but
	// unreachable: calls made after Down returns must fail as the
	// Transport contract says for a node it cannot reach. Required.
	Down func(t testing.TB, nodeID string)
}

// Run runs the conformance suite, one subtest per rule. newTransport
// must return a fresh Harness each time it is called, with no node
// served; Run calls it once per case.
func Run(t *testing.T, newTransport func(t *testing.T) *Harness) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newTransport(t)
			if h == nil || h.Transport == nil || h.Serve == nil || h.Down == nil {
				t.Fatalf("newTransport returned %+v; Transport, Serve and Down are required", h)
			}
			tc.run(t, h)
		})
	}
}
