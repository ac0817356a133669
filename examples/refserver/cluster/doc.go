// Package cluster runs the reference server as one server of a cluster
// that replicates csikit's state on hashicorp/raft (package
// state/raftstate): `refserver server -bootstrap-expect 3 …`.
//
// A Server is a thin wrapper over raftstate's Usage steps. Every server
// keeps a replica of the state (a state.MemStore that raft rebuilds from
// the log and snapshots in Config.DataDir at every start); the
// reference server (package server) reads from it and writes through
// the raftstate Server, its state.Applier. Raft runs on its own TCP
// port (Config.RaftAddr).
//
// # Forming the cluster
//
// Each address in Config.Join is another server's HTTP API. The
// server calls its status (api.StatusPath, retrying with backoff until
// it answers), which gives the peer's ID and raft address for
// raftstate's Join, and keeps the peer's API address by ID for
// forwarding. The cluster bootstraps once Config.BootstrapExpect
// servers know each other, never before. A server restarted on its data dir finds its raft state
// there, rejoins without bootstrapping, and its status calls change
// nothing. The server's ID is Config.ID, or kept in DataDir/IDFile
// (generated at the first start).
//
// # A single server: the same code with one voter
//
// With BootstrapExpect 1 (refserver's default server mode) the server is
// a one-voter cluster: the same raftstate log, boltdb stores and file
// snapshots in DataDir, so every acknowledged write is on disk and a
// restart after kill -9 finds it. With no RaftAddr it uses raft's
// in-memory transport, since a lone voter sends nothing, and short raft
// timeouts (SingleRaftConfig); its API opens once it leads. Config.Dev
// keeps the log and snapshots in memory and writes nothing (tests, the
// throwaway `server -dev`). Run says at start which one runs.
//
// # Writes on a follower: forwarded
//
// Any server answers every API request. Reads come from the local
// replica. A write made on a follower (an API request, an agent's
// registration or plugin report) goes through raftstate's Forward hook:
// the follower POSTs the encoded command to the leader's
// api.ApplyPath, whose handler calls raftstate's ApplyForwarded and
// returns the Result or the error with its csi sentinel and class. The
// follower answers once its own replica has applied the write, so a
// read on the same server right after sees it. Forwarding, rather than
// answering "ask the leader", keeps the CLI and the agents unaware of
// leadership: they talk to any server. A server that knows no leader
// (an election, or a cluster not formed yet) refuses writes with a
// retryable error (HTTP 503); callers retry, as the CLI does. A
// follower's status never names a leader whose API does not answer it
// (api.ServerStatus.UnreachableLeaderID).
//
// Plugin calls (CreateVolume, ControllerPublish, the mount of a claim)
// are made by the server that took the request, through the node
// agents it knows; only the claim release worker is the leader's:
// raftstate's OnLeadership switches it (server.SetLeader), so a new
// leader's worker takes over releases where the old one stopped.
//
// # Node liveness: every server its own
//
// Node liveness and the agents' addresses are not replicated: they are
// in each server's memory (server.Liveness), as in single-server mode.
// Agents are given every server (-server a,b,c; agent.Config.Servers)
// and register and heartbeat with each, so every server can route plugin
// calls and a new leader knows the nodes at once. This is the simplest
// correct choice: heartbeats stay off the raft log, and no server
// decides liveness for another. A server that restarts knows no node
// until the agents' next heartbeat, which it answers "node not found";
// the agent then registers again. Until then a node's status there is
// unknown, which the router and the claim worker treat as "retry
// later". Plugin reports are replicated writes: an agent sends each to
// the first server that takes it.
//
// # Usage
//
//  1. Build the Server with New: its data dir, BootstrapExpect, the raft
//     listen address, and the other servers' API addresses in Join.
//  2. Listen on the API address and call Run(ctx, listener): it starts
//     raft, joins the peers, serves the API (with the internal
//     endpoints under api.InternalPrefix) and runs the claim release
//     worker while it leads, until ctx ends.
//  3. Point node agents at every server, and clients (the CLI) at any.
//  4. To restart, run a new Server with the same flags and data dir: the
//     raft address and the API address must stay the same, since the
//     raft configuration and the other servers keep them.
//
// A durable single server seals its raft log and snapshots with a
// keyring it creates in DataDir/KeyringDir at its first start (key
// files 0600; a wider mode stops the server); a cluster of more
// servers seals when Config.KeyringDir names the keyring they share
// (see package state/sealed for copying and rotating keys).
//
// Like the rest of refserver this is not for production: the API and
// the raft transport are plain HTTP and TCP without authentication
// unless configured, and forwarded commands carry volume secrets in
// clear.
package cluster
