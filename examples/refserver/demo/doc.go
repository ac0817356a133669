// Package demo is the reference server's all-in-one demo and the
// in-process cluster it runs on.
//
// Cluster starts a server and node agents in one process, wired over
// loopback exactly as separate processes are: the agents and clients
// call the server's HTTP API, the server calls the agents over csikit's
// gRPC transport. Every node runs the hostpath plugin on its own unix
// socket; the first as a monolith (controller and node), the others as
// node plugins, all sharing one plugin data dir as a hostpath deployment
// on one host does. Tests of the server and agent modes use a Cluster
// too.
//
// Run is the demo: it creates a volume through the controller on
// node-1, claims it for allocation web-1 on node-2 (ControllerPublish is
// routed to node-1), has node-2 mount it (NodeStageVolume,
// NodePublishVolume), writes a file through the mount, stops the
// allocation, and waits for the claim release worker to unmount,
// detach and free the claim; each step prints as it happens. It then
// serves until ctx ends, unless told to exit. On the way out it drains:
// every claim still held is released through the same path, so nothing
// stays mounted, and a temporary directory is removed only once
// /proc/self/mountinfo shows nothing mounted under it.
//
// RunPlacement is the placement demo: three nodes in two zones
// (ClusterConfig.Topologies, the hostpath plugin's topology), a volume
// created in zone a, the per-node feasibility of a write claim, the
// claim on the zone b node refused with csi.ErrTopologyMismatch and its
// message, and the claim on a zone a node accepted.
//
// RunVolumeOps is the volume operations demo: a volume created,
// mounted on node-2 and written through the mount, snapshotted,
// expanded online while mounted (the node step runs on node-2), then
// the snapshot restored into a new volume mounted on node-1, where the
// file is read back.
//
// The hostpath plugin bind-mounts as root and falls back to symbolic
// links otherwise, so the demo runs for any user.
package demo
