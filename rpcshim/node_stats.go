// node_stats.go holds the route of NodeGetVolumeStats: the router asks
// the node where a volume is staged or published, the node endpoint
// calls its node plugin at the paths its mounter tracks, and the Router
// serves the health monitor's Nodes (package health) over it.

package rpcshim

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// MethodNodeVolumeStats: NodeVolumeStatsRequest →
// NodeVolumeStatsResponse (NodeGetVolumeStats, at the paths the node's
// mounter tracks).
const MethodNodeVolumeStats = "ClientCSI.NodeGetVolumeStats"

// NodeVolumeStatsRequest asks a node for the usage and condition of a
// volume it has staged or published. The node finds the plugin, the
// external ID and the paths in its mounter's state.
type NodeVolumeStatsRequest struct {
	// NodeID is the node the router meant to call; the endpoint refuses
	// a request for another node.
	NodeID    string
	Namespace string
	VolumeID  string
	// PluginID names the volume's plugin, for logs and errors.
	PluginID string `json:",omitempty"`
}

// NodeVolumeStatsResponse is the node plugin's answer.
type NodeVolumeStatsResponse struct {
	Stats plugin.VolumeStats
}

// PathFinder tells where a volume is mounted on the node.
// mounter.Mounter satisfies it. The node endpoint finds it on
// NodeEndpointConfig.Mounter by type assertion; an Unmounter without it
// answers MethodNodeVolumeStats with csi.ErrNotSupported. It must be
// safe for concurrent use.
type PathFinder interface {
	VolumePaths(ctx context.Context, namespace, volumeID string) (mounter.VolumePaths, bool, error)
}

// NodePlugins finds the node plugin of a plugin ID on this node.
// fingerprint.Manager satisfies it. The node endpoint finds it on
// NodeEndpointConfig.Plugins by type assertion; without it
// MethodNodeVolumeStats answers csi.ErrNotSupported.
type NodePlugins interface {
	NodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error)
}

var _ PathFinder = (*mounter.Mounter)(nil)

// nodeVolumeStats serves MethodNodeVolumeStats. A volume the node does
// not have staged or published wraps csi.ErrVolumeNotFound; a node
// plugin that does not advertise GET_VOLUME_STATS wraps
// csi.ErrNotSupported.
func (e *NodeEndpoint) nodeVolumeStats(ctx context.Context, req *NodeVolumeStatsRequest) (*NodeVolumeStatsResponse, error) {
	if req.NodeID != "" && req.NodeID != e.nodeID {
		return nil, e.misrouted("node volume stats", req.NodeID)
	}
	pf, ok := e.mounter.(PathFinder)
	np, ok2 := e.plugins.(NodePlugins)
	if !ok || !ok2 {
		return nil, fmt.Errorf("%w: node %s cannot read volume stats: its mounter or plugin registry does not say where volumes are mounted", csi.ErrNotSupported, e.nodeID)
	}
	what := func() string {
		return fmt.Sprintf("volume stats of %s/%s on node %s", req.Namespace, req.VolumeID, e.nodeID)
	}
	paths, mounted, err := pf.VolumePaths(ctx, req.Namespace, req.VolumeID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what(), err)
	case !mounted:
		return nil, fmt.Errorf("%w: %s: the volume is neither staged nor published here", csi.ErrVolumeNotFound, what())
	}
	client, info, err := np.NodePlugin(paths.PluginID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what(), err)
	}
	if info != nil && info.NodeInfo != nil && !info.NodeInfo.Capabilities.GetVolumeStats {
		return nil, fmt.Errorf("%w: %s: node plugin %s does not advertise GET_VOLUME_STATS", csi.ErrNotSupported, what(), paths.PluginID)
	}
	stats, err := client.NodeGetVolumeStats(ctx, &plugin.NodeVolumeStatsRequest{
		ExternalID: paths.ExternalID, VolumePath: paths.VolumePath, StagingPath: paths.StagingPath,
	})
	if err != nil {
		e.logger.Debug("node volume stats failed", "namespace", req.Namespace, "volume_id", req.VolumeID,
			"plugin_id", paths.PluginID, "class", csi.Classify(err), "error", err)
		return nil, fmt.Errorf("%s: NodeGetVolumeStats: %w", what(), err)
	}
	return &NodeVolumeStatsResponse{Stats: *stats}, nil
}

// NodeVolumeStats asks req.NodeID for the usage and condition of a
// volume it has staged or published (MethodNodeVolumeStats). The node
// must be ready: one that is down or unknown gives csi.ErrNodeNotReady
// (Retryable), one the host reports gone csi.ErrNodeNotFound. A volume
// the node no longer has mounted gives csi.ErrVolumeNotFound.
func (r *Router) NodeVolumeStats(ctx context.Context, req *NodeVolumeStatsRequest) (*NodeVolumeStatsResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: rpcshim: NodeVolumeStats with a nil request", csi.ErrInvalidRequest)
	}
	if err := csi.ValidateNodeID(req.NodeID); err != nil {
		return nil, fmt.Errorf("rpcshim: node volume stats of volume %s: %w", req.VolumeID, err)
	}
	what := fmt.Sprintf("node volume stats of %s/%s on node %s", req.Namespace, req.VolumeID, req.NodeID)
	resp := new(NodeVolumeStatsResponse)
	if err := r.callReadyNode(ctx, req.NodeID, MethodNodeVolumeStats, what, "", req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// HealthNodes returns the Router as the health monitor's Nodes:
// NodeGetVolumeStats on the node the request names, at the paths its
// mounter tracks.
//
// Package health sits above rpcshim and declares the Nodes interface
// that NodeStatsCalls meets.
func (r *Router) HealthNodes() NodeStatsCalls { return NodeStatsCalls{r} }

// NodeStatsCalls asks nodes for volume stats through a Router; see
// Router.HealthNodes.
type NodeStatsCalls struct{ r *Router }

// VolumeStats asks nodeID for the usage and condition of v
// (Router.NodeVolumeStats).
func (n NodeStatsCalls) VolumeStats(ctx context.Context, nodeID string, v *csi.Volume) (*plugin.VolumeStats, error) {
	resp, err := n.r.NodeVolumeStats(ctx, &NodeVolumeStatsRequest{NodeID: nodeID, Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID})
	if err != nil {
		return nil, err
	}
	return &resp.Stats, nil
}
