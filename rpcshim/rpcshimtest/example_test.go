package rpcshimtest_test

import (
	"testing"

	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/rpcshim/rpcshimtest"
)

// A transport runs the suite from one of its tests. Here the transport
// is rpcshim's InmemTransport, whose Serve registers the node's Handler
// and whose Down sets the node down; a host with its own RPC layer
// would start its node server for the Handler in Serve and stop it in
// Down.
func ExampleRun() {
	testTransport := func(t *testing.T) {
		rpcshimtest.Run(t, func(t *testing.T) *rpcshimtest.Harness {
			tr := rpcshim.NewInmemTransport()
			return &rpcshimtest.Harness{
				Transport: tr,
				Serve:     func(_ testing.TB, nodeID string, h rpcshim.Handler) { tr.Register(nodeID, h) },
				Down:      func(_ testing.TB, nodeID string) { tr.SetDown(nodeID, true) },
			}
		})
	}
	_ = testTransport // in a _test.go file: func TestTransport(t *testing.T) { testTransport(t) }
}
