package agent

import "github.com/csikit/csikit/rpcshim"

// The agent's node endpoint serves the server's NodeGetVolumeStats
// calls (rpcshim.MethodNodeVolumeStats) for the health monitor: it
// finds the node plugin through the observed registry and the paths in
// the mounter.
var (
	_ rpcshim.NodePlugins = (*observedPlugins)(nil)
)
