// Package rpcshim is csikit's ClientCSI router, server and node endpoints,
// and the transport contract between server and nodes.
//
// The server never talks to a CSI plugin itself: controller calls are
// routed to a node that runs the controller plugin, and node calls go to
// the node that owns the mount. Both cross the host's network through a
// Transport. This package defines that contract, ships two
// implementations, and uses it in the Router, the Server and the
// NodeEndpoint.
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
//     partition. Use it in tests and in single-process hosts. A
//     NodeEndpoint's own methods run on the caller's goroutine (they end
//     with ctx by construction); any other handler gets a goroutine per
//     call, so the caller returns at ctx's end even if it ignores ctx.
//     Close at shutdown waits for those goroutines.
//   - GRPCTransport and GRPCNodeServer carry calls over gRPC as one unary
//     method, NodeServiceName + "/Call", whose messages are JSON
//     envelopes ({"method", "body"} and {"body", "error"}); no generated
//     code is involved, and the codec is passed per call and per server,
//     never registered globally. A node server refuses every call
//     that lacks the server's identity (csi.ErrPermissionDenied): mutual
//     TLS (GRPCNodeServerConfig.TLS and GRPCTransportConfig.TLS,
//     preferred) or a per-cluster token in metadata (ClusterToken on
//     both); Insecure on both is for tests and private sockets.
//   - A host with its own RPC layer implements Transport: encode req as
//     JSON, hand it to the node's Handler, send back the reply bytes or
//     EncodeError(err), and return WireError.Err() on the server. It
//     checks its implementation against the whole contract with
//     rpcshimtest.Run, which both transports here pass.
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
// Three parts use the transport:
//
//   - Router (server side) sends controller calls (ControllerPublish,
//     ControllerUnpublish, ValidateVolumeCapabilities, CreateVolume,
//     DeleteVolume, ListVolumes, ExpandVolume, CreateSnapshot,
//     DeleteSnapshot, ListSnapshots) to a node that runs a healthy
//     controller of the plugin, and node detach to the node that owns a
//     claim. Its NodeDetach and ControllerDetach are the claim release
//     worker's steps (claimgc.NodeDetacher and
//     claimgc.ControllerDetacher).
//   - Server (server side) is the host API: register, deregister,
//     create and delete volumes, read volumes and plugins, claim a
//     volume (claim first, then ControllerPublish for a new attachment),
//     and take a node's early unpublish report. Feasibility answers a
//     scheduler's "which nodes can take this claim, and why not the
//     others" (a csi.Reasons per node), and CreateVolume turns the
//     host's candidate nodes into the CSI accessibility requirements of
//     a zonal plugin (see VolumeCreateRequest). Snapshots follow the
//     same pattern (CreateSnapshot, DeleteSnapshot, ListSnapshots,
//     ReconcileSnapshots): intent first, a deterministic CSI name, a
//     resumable create; VolumeCreateRequest.From restores a snapshot or
//     clones a volume. It reads the state.Reader and writes only
//     through a state.Applier.
//   - NodeEndpoint (node side) answers the router: controller calls go
//     to the node's local controller plugin, node detach to its mounter.
//
// The Method… constants name the calls the router sends, each with its
// request and response types. Controller requests embed
// CSIControllerQuery: the plugin, and optionally the node whose
// controller must serve the call.
//
// Choosing a controller node: the candidates are the nodes whose
// controller instance of the plugin is healthy, read from the store's
// per-plugin index (state.Reader.HealthyControllers), so the cost does
// not grow with the nodes of the cluster, and read again only when the
// plugin table's index moved: in between, a call reads that index only. They are tried in node ID
// order, the node that last served the plugin first; a node that
// NodeStatuses does not report ready is passed over, a Retryable or
// Uncertain answer (the plugin not running there, csi.ErrPluginNotFound;
// the node unreachable; the plugin Unavailable) moves to the next node,
// and a Final answer is returned. With no candidate left the error is a
// *NoControllerError matching csi.ErrNoController, which names the
// plugin and why each node was passed over. A request that names its
// node is checked instead (known, ready, healthy controller) and sent
// there only. ControllerPublish and ControllerUnpublish calls for one
// plugin and one target node run one at a time; see Router.
//
// # Usage: router and endpoints
//
// On the server (the leader):
//
//  1. Build the store and its applier (state.NewMemStore,
//     state.NewLocalApplier or the host's replicated Applier), the
//     transport to the nodes (NewGRPCTransport, or NewInmemTransport in
//     a single process) and the host's NodeStatuses.
//  2. NewRouter with the store, transport and node statuses.
//  3. NewServer with the store, applier and router, and serve its
//     methods through the host's own API (their request and response
//     types are JSON-ready: a Mux can serve them on the host's
//     transport). Before placing a workload, call Feasibility to keep it
//     off nodes the claim would be refused on. Before a workload uses a
//     volume, call Claim and hand the response's Volume and Claim to the
//     claim's node (they hold the volume's secrets; send them nowhere
//     else). Retry a claim that failed with a Retryable or Uncertain
//     error; it is idempotent.
//  4. Run the claim release worker (claimgc.New) with the router as its
//     Nodes and Controllers and the same NodeStatuses.
//  5. Feed each node's fingerprints to the store (state.UpsertNodePlugins
//     through the applier) as the nodes report them; the router reads
//     them on every call. After a node's report, and after a node mounts
//     a volume, call CompleteNodeExpansions for it: it runs the
//     NodeExpandVolume steps the node still owes. A mount that staged
//     the volume has already run a pending step itself (its
//     mounter.MountInfo says NodeExpandedBytes): report that with
//     NodeExpandedAtMount first, and the step is not repeated.
//  6. When this server becomes the leader, call ResumeVolumeChanges: it
//     finishes the creates, expansions and modifies the previous leader
//     wrote but did not complete.
//
// On each node agent:
//
//  1. Build the node's plugin registry (fingerprint.New, Run, Register
//     each plugin allocation) and its mounter (mounter.New with the
//     registry as its Plugins).
//  2. NewNodeEndpoint with the node's ID, the registry and the mounter.
//  3. Serve it: NewGRPCNodeServer with the endpoint as Handler and Serve
//     on the node's socket (or Register on the host's own gRPC server),
//     or InmemTransport.Register in a single process. Methods of the
//     agent's own may be added to the endpoint's Mux.
//  4. Mount claimed volumes with mounter.NewMountRequest(Volume, Claim)
//     from the server's claim response. When a workload stops, unmount
//     and, optionally, report it with the server's Unpublish
//     (NodeDetached set) so the release goes straight to the controller
//     step.
//
// # Authorization
//
// A Server asks its Authorizer before every endpoint reads or writes
// anything: a namespace and a csi.Permission, with the caller's
// principal in ctx (csi.WithPrincipal, set by the host's API layer once
// it has authenticated the caller). A refusal is csi.ErrPermissionDenied
// and crosses transports like every sentinel. Two ways to run it:
//
//   - Open: ServerConfig.Authorizer nil. Every call is allowed; the
//     host authorizes upstream, before its API calls the Server.
//   - Checked: ServerConfig.Authorizer set (an AuthorizerFunc over the
//     host's policies). See Authorizer for the permission each endpoint
//     asks and ExampleAuthorizerFunc for a policy table.
package rpcshim
