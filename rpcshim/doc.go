// Package rpcshim is csikit's ClientCSI router, server and node endpoints,
// and the transport contract between server and nodes.
//
// The server never talks to a CSI plugin itself: controller calls are
// routed to a node that runs the controller plugin, and node calls go to
// the node that owns the mount. Both cross the host's network through a
// Transport. This package defines that contract, ships two
// implementations, and (in the router and endpoint files) uses it.
//
// # Transport
//
// A Transport carries one call from the server to a node and brings back
// the reply:
//
//	Call(ctx, nodeID, method, req, resp) error
//
// On the node, a Handler serves the call; Mux is the Handler that
// dispatches by method name to typed functions registered with Handle.
// Requests and replies cross as JSON, so they are plain Go structs with
// exported fields, and nothing that must stay on one side (a secret in a
// log-bound field, a channel, a function) belongs in them.
//
// Errors keep their meaning across the wire. The node's error is
// described by EncodeError as a WireError (the csi sentinel it matches,
// its csi.Class, the gRPC code and method of a plugin's *csi.RPCError, and
// its message), and rebuilt on the server by WireError.Err as a
// *RemoteError. On the server, errors.Is(err, csi.ErrPluginNotFound) holds
// if the node's error wrapped it, csi.Classify gives the class it had on
// the node, and csi.CodeOf and csi.TeardownDone see the plugin's code.
// Nothing is matched by string. Only one sentinel survives the trip; wrap
// the one that tells the caller what to do. Messages cross unchanged, so
// node code must never put a CSI secret in an error.
//
// Failures of the transport itself follow one rule for every
// implementation:
//
//   - node unknown, down or unreachable: an error matching
//     csi.ErrNodeNotReady or csi.ErrUnavailable that names the node;
//     Retryable, the call did not run;
//   - ctx ended before the reply: ctx.Err() in the chain; Uncertain, the
//     call may have run;
//   - the reply does not decode, or the node does not serve the method
//     (csi.ErrNotSupported): Final, server and node disagree on versions.
//
// The transports:
//
//   - InmemTransport calls Handlers in the same process, through the same
//     JSON and error encoding as the network, with SetDown to simulate a
//     partition. Use it in tests and in single-process hosts.
//   - GRPCTransport and GRPCNodeServer carry calls over gRPC as one unary
//     method, NodeServiceName + "/Call", whose messages are JSON
//     envelopes ({"method", "body"} and {"body", "error"}); no generated
//     code is involved, and the codec is passed per call and per server,
//     never registered globally. Connections are insecure by default,
//     which suits unix sockets and loopback; hosts that cross a network
//     pass TLS credentials in GRPCTransportConfig.DialOptions and
//     GRPCNodeServerConfig.ServerOptions.
//   - A host with its own RPC layer implements Transport: encode req as
//     JSON, hand it to the node's Handler, send back the reply bytes or
//     EncodeError(err), and return WireError.Err() on the server.
//
// NodeStatuses is the host's answer to "is this node ready, down, gone or
// unknown"; InmemNodeStatuses is a map-based one.
//
// # Usage: the transport
//
// On each node agent:
//
//  1. Build a Mux and register the node endpoints on it (Handle).
//  2. Serve it: NewGRPCNodeServer with the Mux, then Serve(ctx, lis) on a
//     unix socket or TCP listener; or Register it on the host's own
//     *grpc.Server built with ServerCodecOption. The host advertises the
//     address in its node records.
//
// On the server:
//
//  1. Build a GRPCTransport whose Resolve looks the node's address up in
//     the host's node records (an unknown node is an error matching
//     csi.ErrNodeNotReady).
//  2. Hand it, with the host's NodeStatuses, to the router and server
//     endpoints.
//  3. Call Forget when a node leaves for good, and Close at shutdown.
//
// # Router and endpoints
//
// (This section is written with the router, the server endpoints and the
// node endpoints: the methods they define, how a controller node is
// chosen, and the host's duties to wire them.)
package rpcshim
