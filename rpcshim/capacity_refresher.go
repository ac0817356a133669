package rpcshim

// CapacityRefresher is told when a plugin's capacity may have changed.
// Refresh must not block.
type CapacityRefresher interface {
	Refresh(pluginID string)
}
