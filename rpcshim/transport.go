package rpcshim

import (
	"context"

	"github.com/csikit/csikit/csi"
)

// Transport carries a call from the server to one node's endpoint and
// brings back the reply. The host picks an implementation: the gRPC one in
// this package (GRPCTransport), the in-memory one for tests and
// single-process hosts (InmemTransport), or its own RPC layer.
//
// Call is made by the router and the server endpoints, from any goroutine;
// implementations are safe for concurrent use. A call honours ctx: it
// returns when ctx is cancelled or its deadline passes, with an error
// that has ctx.Err() in its chain.
//
// req is encoded as JSON and must not be changed until Call returns. On
// success the node's JSON reply is decoded into resp, which must be a
// pointer (or nil when the caller does not want the reply); Call then
// owns nothing the caller passed in.
//
// Errors:
//   - The node cannot be reached (unknown to the transport, partitioned,
//     its agent not listening): an error matching csi.ErrNodeNotReady or
//     csi.ErrUnavailable that names the node. Retryable; the call did not
//     run.
//   - ctx ended first: an error wrapping ctx.Err(). Uncertain; the call
//     may have run on the node.
//   - The node's handler failed: its error with identity and class
//     restored on this side (see WireError). errors.Is holds for the csi
//     sentinel the node wrapped, csi.Classify returns the class it had on
//     the node, and csi.CodeOf returns the gRPC code of a plugin's
//     *csi.RPCError. The message is the node's, unchanged.
type Transport interface {
	Call(ctx context.Context, nodeID, method string, req, resp any) error
}

// NodeStatuses tells the server whether a node is ready, down, gone or
// unknown. The host implements it from its own node records (heartbeats,
// membership); InmemNodeStatuses is a map-based implementation for tests
// and single-process hosts.
//
// NodeStatus is called by the router and the claim release path from any
// goroutine, so implementations are safe for concurrent use. An error
// means the host could not tell (its store is unavailable, for example);
// callers treat it like NodeStatusUnknown and retry later. A node the
// host has never heard of is NodeStatusUnknown with a nil error.
type NodeStatuses interface {
	NodeStatus(ctx context.Context, nodeID string) (csi.NodeStatus, error)
}

// Handler is a node's side of a transport: it serves one call. body is the
// JSON-encoded request and the returned bytes are the JSON-encoded reply
// (nil is read as JSON null).
//
// ServeCall is called by the transport from one goroutine per call, many
// at a time, with the caller's deadline in ctx; it must return soon after
// ctx ends. body is owned by the handler once passed; the returned bytes
// belong to the transport.
//
// A returned error is sent back to the caller through EncodeError, so
// wrap csi sentinels (%w) and return plugin failures as *csi.RPCError to
// keep their meaning on the server. The error's message crosses the wire
// as it is: it must never hold a CSI secret. Mux is the usual Handler.
type Handler interface {
	ServeCall(ctx context.Context, method string, body []byte) ([]byte, error)
}

// inlineHandler is implemented by this package's Handlers (Mux and
// NodeEndpoint) to tell the in-memory transport which methods return
// soon after ctx ends by construction: those it registered itself,
// whose every blocking call takes ctx. The transport runs them on the
// caller's goroutine. It is unexported on purpose: a host's Handler,
// and a method added with Handle, keep a goroutine of their own, so
// that a caller still gets its answer at ctx's end if they ignore ctx.
type inlineHandler interface {
	servesInline(method string) bool
}
