package rpcshim

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// NodeExpandedRequest is a node's report that a mount ran a volume's
// pending node expansion at stage time (mounter.MountInfo's
// NodeExpandedBytes), with the range the mount request carried.
type NodeExpandedRequest struct {
	Namespace     string
	VolumeID      string
	NodeID        string
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
	// Capacity is what NodeExpandVolume reported.
	Capacity int64
}

// NodeExpandedAtMount records a node step the node's mounter ran when it
// staged the volume, so that CompleteNodeExpansions does not run it
// again. A report for an expansion that is no longer the volume's
// (another range) or that the node no longer owes changes nothing: the
// server's own node step covers the newer one.
func (s *Server) NodeExpandedAtMount(ctx context.Context, req *NodeExpandedRequest) error {
	if req == nil {
		return fmt.Errorf("%w: nil node expansion report", csi.ErrInvalidRequest)
	}
	if err := s.authorize(ctx, "report a node expansion on node "+req.NodeID, "", csi.PermNodeRegister); err != nil {
		return err
	}
	if err := csi.ValidateNodeID(req.NodeID); err != nil {
		return fmt.Errorf("report a node expansion: %w", err)
	}
	unlock, err := s.lockVolume(ctx, "report a node expansion", req.Namespace, req.VolumeID)
	if err != nil {
		return err
	}
	defer unlock()
	v, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return fmt.Errorf("report a node expansion of %s/%s: %w", req.Namespace, req.VolumeID, err)
	}
	e := v.Expansion
	if !e.SameRange(req.RequiredBytes, req.LimitBytes) || !e.NeedsNode(req.NodeID) {
		return nil
	}
	rec := state.RecordNodeExpansion{Namespace: v.Namespace, VolumeID: v.ID, NodeID: req.NodeID, Capacity: req.Capacity}
	if _, err := s.applier.Apply(ctx, rec); err != nil {
		return fmt.Errorf("report a node expansion of %s/%s on node %s: %w", v.Namespace, v.ID, req.NodeID, err)
	}
	return nil
}
