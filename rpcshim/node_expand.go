package rpcshim

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// Expander grows a volume's file system on this node. mounter.Mounter
// satisfies it. The node endpoint finds it on NodeEndpointConfig.Mounter
// by type assertion; an Unmounter without it answers MethodNodeExpand
// with csi.ErrNotSupported. It is called from one goroutine per call
// and must be safe for concurrent use; errors keep their class.
type Expander interface {
	ExpandVolume(ctx context.Context, req *mounter.ExpandRequest) (*mounter.ExpandResult, error)
}

var _ Expander = (*mounter.Mounter)(nil)

// handleExpandCalls registers the expansion and modify methods.
func (e *NodeEndpoint) handleExpandCalls() {
	handleController(e, MethodControllerModifyVolume, "ControllerModifyVolume", modifyVolume)
	handle(e.mux, MethodNodeExpand, e.nodeExpand, true)
}

func modifyVolume(ctx context.Context, c plugin.ControllerClient, req *ModifyVolumeRequest) (*ModifyVolumeResponse, error) {
	m, ok := c.(plugin.ControllerModifier)
	if !ok {
		return nil, fmt.Errorf("%w: the controller client of plugin %s has no ControllerModifyVolume", csi.ErrNotSupported, req.PluginID)
	}
	if err := m.ControllerModifyVolume(ctx, &req.ControllerModifyRequest); err != nil {
		return nil, err
	}
	return &ModifyVolumeResponse{}, nil
}

// nodeExpand serves MethodNodeExpand with the node's mounter.
func (e *NodeEndpoint) nodeExpand(ctx context.Context, req *NodeExpandRequest) (*NodeExpandResponse, error) {
	if req.NodeID != "" && req.NodeID != e.nodeID {
		return nil, e.misrouted("node expand", req.NodeID)
	}
	x, ok := e.mounter.(Expander)
	if !ok {
		return nil, fmt.Errorf("%w: node %s: its mounter cannot expand volumes", csi.ErrNotSupported, e.nodeID)
	}
	res, err := x.ExpandVolume(ctx, &mounter.ExpandRequest{
		Namespace: req.Namespace, VolumeID: req.VolumeID,
		RequiredBytes: req.RequiredBytes, LimitBytes: req.LimitBytes, Secrets: req.Secrets,
	})
	if err != nil {
		e.logger.Debug("node expand failed", "namespace", req.Namespace, "volume_id", req.VolumeID,
			"plugin_id", req.PluginID, "class", csi.Classify(err), "error", err)
		return nil, fmt.Errorf("on node %s: %w", e.nodeID, err)
	}
	return &NodeExpandResponse{Mounted: res.Mounted, Capacity: res.Capacity}, nil
}
