// Package server is the reference server: csikit's server side wired
// from its exported API behind a small HTTP+JSON API (package api).
//
// It holds a state.Store (in memory by default) and writes only through
// a state.Applier; an rpcshim.Router and rpcshim.Server make the plugin
// calls through node agents, reached over csikit's gRPC transport
// (rpcshim.GRPCTransport); a claimgc.Worker releases the claims of
// stopped allocations. Node agents register with the API (their node ID
// and the gRPC target of their node service), heartbeat, and report
// their plugins' fingerprints, which the server applies as
// state.UpsertNodePlugins.
//
// Node liveness is Liveness: ready while the last heartbeat is within
// Config.HeartbeatTTL, down after, unknown for a node that never
// registered. It is small pure logic over the times it is given; the
// Server answers rpcshim.NodeStatuses and claimgc.NodeStatuses from it
// at Config.Now. Node addresses and liveness are kept in memory: after a
// restart the server answers heartbeats "node not found", and each agent
// registers again and resends its plugins.
//
// # Usage
//
//  1. Build it with New. Give Config.Store and Config.Applier to keep the
//     state elsewhere (a replicated host passes its Raft-backed applier
//     and its replica's store), or neither for a new in-memory store.
//  2. Run(ctx, listener) serves the API and runs the claim release
//     worker until ctx ends, then stops gracefully.
//  3. A single server is its own leader: its claim worker is on from the
//     start. A replicated host sets Config.Follower and calls
//     SetLeader(true) or SetLeader(false) on every leadership change;
//     that one method is the whole leadership switch.
//  4. Point node agents (package agent) and clients (package cli, or
//     api.Client) at the API's address.
//
// What happens on each write is printed as a lifecycle line through
// Config.Events ("[server] volume demo-vol claimed by web-1 on node-2
// …"). Volume secrets never leave the server: reads strip them
// (rpcshim.Server's contract), claim responses carry the claim only, and
// the secrets go to a node agent only inside a mount request for that
// node's own claim.
//
// In cluster mode (package cluster) the same Server runs on every server
// of a raft cluster: Config.Store is the server's replica, Config.Applier
// the raftstate Server (a follower's writes are forwarded to the
// leader), Config.Internal serves the server-to-server endpoints, and
// raftstate's leadership signal calls SetLeader. Liveness stays per
// server: agents heartbeat every server.
//
// It is a reference, not a production control plane: no
// authentication, no TLS.
package server
