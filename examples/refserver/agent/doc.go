// Package agent is the reference node agent: csikit's node side wired
// from its exported API.
//
// An Agent runs the node's plugin registry (fingerprint.Manager), its
// mounter (mounter.Mounter, state kept in Config.DataDir so a restarted
// agent resumes what is mounted) and its node endpoint
// (rpcshim.NodeEndpoint), served to the server over csikit's gRPC
// transport (rpcshim.GRPCNodeServer). Besides csikit's methods, the
// endpoint serves api.MethodMountVolume, through which the server has a
// claimed volume mounted for an allocation. It can run the hostpath CSI
// plugin in-process (Config.Hostpath) or use plugins already running on
// the node (Config.Plugins, the -plugin flag's ID=ENDPOINT[:TYPE]).
//
// Talking to the server, it registers (node ID, node-service address,
// plugin instances), heartbeats every Config.HeartbeatInterval, and
// forwards every fingerprint report (the manager's Report) to the
// server's API. When the server answers a heartbeat "node not found" (it
// restarted), the agent registers again and resends its latest report.
//
// For a cluster of servers (package cluster), Config.Servers lists every
// server: each keeps its own node liveness and addresses, so the agent
// registers and heartbeats with all of them (a server that is down just
// misses heartbeats until it is back), and sends each plugin report, a
// replicated write, to the first server that takes it.
//
// Each mutating CSI call the mounter or the node endpoint makes prints a
// lifecycle line through Config.Events ("[node-2] NodeStageVolume ok:
// …"). The lines name volumes and paths, never secrets.
//
// # Usage
//
//  1. Build an api.Client of the server and the agent with New.
//  2. Listen on the node service's address (TCP, or a unix socket) and
//     call Run(ctx, listener). It retries the registration until the
//     server answers, and returns once ctx ends and everything it
//     started has stopped, the in-process plugin last.
//  3. Stopping the agent leaves mounts in place: workloads keep their
//     volumes, and the server's claim worker unmounts through the agent
//     once their allocations stop. A clean stop tells every server the
//     node leaves (api.Client.Leave), so it is down there at once; a
//     killed agent's node is down after the server's heartbeat TTL.
package agent
