package rpcshim

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
)

// ModifyVolume changes a volume's mutable parameters through a
// controller (MethodControllerModifyVolume).
func (r *Router) ModifyVolume(ctx context.Context, req *ModifyVolumeRequest) (*ModifyVolumeResponse, error) {
	return callController[ModifyVolumeRequest, ModifyVolumeResponse](ctx, r, MethodControllerModifyVolume, req)
}

// NodeExpand asks req.NodeID to grow a volume it has staged or
// published (MethodNodeExpand, served by the node's mounter). The node
// must be ready, as for NodeDetach: one that is down, or that the host
// has no record of, gives csi.ErrNodeNotReady (Retryable); one the host
// reports gone gives csi.ErrNodeNotFound (Final: it holds no mount any
// more). Other errors are the node's, with their class.
func (r *Router) NodeExpand(ctx context.Context, req *NodeExpandRequest) (*NodeExpandResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: rpcshim: NodeExpand with a nil request", csi.ErrInvalidRequest)
	}
	if err := csi.ValidateNodeID(req.NodeID); err != nil {
		return nil, fmt.Errorf("rpcshim: node expand of volume %s: %w", req.VolumeID, err)
	}
	what := func() string {
		return fmt.Sprintf("node expand of volume %s/%s on node %s", req.Namespace, req.VolumeID, req.NodeID)
	}
	st, err := r.statuses.NodeStatus(ctx, req.NodeID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s: the host cannot tell whether the node is ready (%w); retry later", csi.ErrNodeNotReady, what(), err)
	case st == csi.NodeStatusGone:
		return nil, fmt.Errorf("%w: %s: the node has left the cluster", csi.ErrNodeNotFound, what())
	case st != csi.NodeStatusReady:
		return nil, fmt.Errorf("%w: %s: the node is %s; it completes the expansion once it is ready", csi.ErrNodeNotReady, what(), st)
	}
	resp := new(NodeExpandResponse)
	if err := r.transport.Call(ctx, req.NodeID, MethodNodeExpand, req, resp); err != nil {
		return nil, fmt.Errorf("%s: %w", what(), err)
	}
	return resp, nil
}
