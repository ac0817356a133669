// Package rpcshimtest is a conformance suite for rpcshim.Transport
// implementations, in the spirit of testing/fstest.TestFS and
// state/statetest.
//
// Run drives a transport through the whole contract of rpcshim.Transport
// in subtests: typed round trips through a Mux, replies that are nil or
// discarded, errors that keep their message, csi sentinel, class and
// plugin code across the wire, unknown and unreachable nodes, deadlines
// and cancellation that reach the handler, a done ctx that sends
// nothing, requests and replies that do not encode or decode, and
// concurrent calls to several nodes. Failures are reported per case, so
// one run shows every broken rule, not only the first.
//
// The suite needs more than the Transport: a way to give a node an
// endpoint and a way to cut a node off, which only the host knows how to
// do with its own RPC layer. The host supplies them in a Harness.
//
// # Usage
//
//  1. In a _test.go file of the package that holds your Transport, write
//     a function that builds a fresh Harness: the transport, Serve (make
//     a Handler the endpoint of a node ID, for example by starting your
//     node server for it and recording its address) and Down (leave the
//     node known but unreachable, for example by stopping that server).
//     Release everything with t.Cleanup.
//  2. Call Run from a test with that function. It calls the function
//     once per case, so cases never share nodes.
//  3. Read the failures by case name; each names the rule of the
//     Transport contract (see rpcshim.Transport) that the transport
//     broke.
//
// rpcshim's own InmemTransport and GRPCTransport pass it.
package rpcshimtest
