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
	what := fmt.Sprintf("node expand of volume %s/%s on node %s", req.Namespace, req.VolumeID, req.NodeID)
	resp := new(NodeExpandResponse)
	if err := r.callReadyNode(ctx, req.NodeID, MethodNodeExpand, what, "; it completes the expansion once it is ready", req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// callReadyNode calls method on node, which must be ready: one that is
// down, or that the host has no record of, gives csi.ErrNodeNotReady
// (Retryable, with notReadyHint after the node's status); one the host
// reports gone gives csi.ErrNodeNotFound. what names the call in errors.
func (r *Router) callReadyNode(ctx context.Context, node, method, what, notReadyHint string, req, resp any) error {
	st, err := r.statuses.NodeStatus(ctx, node)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: the host cannot tell whether the node is ready (%w); retry later", csi.ErrNodeNotReady, what, err)
	case st == csi.NodeStatusGone:
		return fmt.Errorf("%w: %s: the node has left the cluster", csi.ErrNodeNotFound, what)
	case st != csi.NodeStatusReady:
		return fmt.Errorf("%w: %s: the node is %s%s", csi.ErrNodeNotReady, what, st, notReadyHint)
	}
	if err := r.transport.Call(ctx, node, method, req, resp); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
