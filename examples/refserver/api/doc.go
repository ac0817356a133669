// Package api is the reference server's HTTP+JSON API: the request and
// response types, the error encoding, the node-service method the server
// adds to csikit's transport, and Client, the Go client that the node
// agents, the CLI and the demo use.
//
// The API is plain net/http on loopback, with no framework and no
// authentication: it is a reference for wiring csikit, not a hardened
// control plane. Bodies are JSON; csikit's types (csi.Volume, csi.Plugin,
// csi.Claim, csi.PluginInfo) cross as they are, with the server stripping
// volume secrets from everything it returns.
//
// # Endpoints
//
// Volumes:
//
//	GET    /v1/volumes?namespace=NS&prefix=P        list (blocking)
//	GET    /v1/volumes/{namespace}/{id}             one volume (blocking)
//	PUT    /v1/volumes/{namespace}/{id}             register an existing volume (rpcshim.VolumeRegisterRequest)
//	POST   /v1/volumes/{namespace}/{id}/create      create through the plugin's controller (rpcshim.VolumeCreateRequest)
//	DELETE /v1/volumes/{namespace}/{id}             delete in the plugin and deregister
//	DELETE /v1/volumes/{namespace}/{id}?deregister=true[&force=true]   deregister only
//	POST   /v1/volumes/{namespace}/{id}/claim       claim for an allocation (ClaimRequest → ClaimResponse)
//	POST   /v1/volumes/{namespace}/{id}/place       which nodes can take a claim, and why not (PlaceRequest → PlaceResponse)
//	POST   /v1/volumes/{namespace}/{id}/expand      grow in the controller and on its nodes (rpcshim.VolumeExpandRequest → rpcshim.VolumeChangeResponse)
//	POST   /v1/volumes/{namespace}/{id}/modify      change its mutable parameters (rpcshim.VolumeModifyRequest → rpcshim.VolumeChangeResponse)
//
// Plugins:
//
//	GET    /v1/plugins                              list (blocking)
//	GET    /v1/plugins/{id}                         one plugin with its instances (blocking)
//
// Allocations:
//
//	POST   /v1/allocations/{id}/release             mark terminal: its claims become past claims and the claim worker releases them
//	GET    /v1/allocations/{id}/claims              the allocation's claims, live and past (blocking)
//
// Nodes (the agents call these):
//
//	GET    /v1/nodes                                every node with its liveness and plugins
//	PUT    /v1/nodes/{id}                           register (RegisterNodeRequest: the node service's gRPC target)
//	PUT    /v1/nodes/{id}/heartbeat                 keep the node ready
//	PUT    /v1/nodes/{id}/plugins                   the node's fingerprints (ReportPluginsRequest)
//
// Cluster mode only (package cluster; server to server):
//
//	GET    /v1/internal/status[?wait-leader=D]      this server, the leader, the raft configuration (ServerStatus)
//	POST   /v1/internal/apply                       apply an encoded state command on the leader (ApplyResponse)
//
// # Blocking queries
//
// The endpoints marked "blocking" take ?index=N&wait=D: the server
// answers once the table behind the endpoint has changed past index N,
// or after D (default DefaultWait, at most MaxWait) with the current
// data. Every read answers with the header IndexHeader, the index to
// pass next time. Client.WaitVolume and Client.WaitPlugin loop on this,
// so callers wait for a condition without polling.
//
// # Errors
//
// A failed request answers a non-2xx status and ErrorResponse, whose
// Error is rpcshim's WireError: the csi sentinel the error matched, its
// class and its message. Client rebuilds it, so errors.Is(err,
// csi.ErrVolumeInUse) and csi.Classify work on the caller's side as on
// the server's.
//
// # Node service
//
// The server reaches node agents only through csikit's gRPC transport.
// Besides csikit's own methods (rpcshim.Method…), agents serve
// MethodMountVolume, which mounts a claimed volume for an allocation:
// the server forwards it when a claim asks for a mount.
package api
