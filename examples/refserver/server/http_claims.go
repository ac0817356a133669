package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) (*api.ClaimResponse, uint64, error) {
	ns, id, req, err := volumeRequest[api.ClaimRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := errors.Join(csi.ValidateAllocationID(req.AllocationID), csi.ValidateNodeID(req.NodeID)); err != nil {
		return nil, 0, err
	}
	ctx := r.Context()
	vol, err := s.api.Volume(ctx, ns, id)
	if err != nil {
		return nil, 0, err
	}
	if req.AccessMode == csi.AccessModeUnknown && req.AttachmentMode == csi.AttachmentModeUnknown {
		if len(vol.Capabilities) != 1 {
			return nil, 0, fmt.Errorf("%w: volume %s/%s allows %d capabilities (%v): name the access and attachment modes of the claim",
				csi.ErrInvalidRequest, ns, id, len(vol.Capabilities), vol.Capabilities)
		}
		req.AccessMode, req.AttachmentMode = vol.Capabilities[0].AccessMode, vol.Capabilities[0].AttachmentMode
	}
	// The node must be known before anything is written: a claim on a
	// node that never registered would otherwise leave the allocation
	// placed there.
	if _, err := s.live.Address(req.NodeID); err != nil {
		return nil, 0, fmt.Errorf("%w: claim volume %s/%s for allocation %s: node %s has not registered with this server; start its agent or claim on another node",
			csi.ErrNodeNotFound, ns, id, req.AllocationID, req.NodeID)
	}
	if err := s.placeAllocation(ctx, req.AllocationID, ns, req.NodeID); err != nil {
		return nil, 0, err
	}
	resp, err := s.api.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: ns, VolumeID: id, Claim: csi.Claim{
		AllocationID: req.AllocationID, NodeID: req.NodeID, Mode: req.Mode,
		AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, MountOptions: req.MountOptions,
	}})
	if err != nil {
		return nil, 0, err
	}
	out := &api.ClaimResponse{
		Namespace: ns, VolumeID: id, Claim: resp.Claim, Index: resp.Index,
		ControllerNodeID: resp.ControllerNodeID,
	}
	attached := ""
	if out.ControllerNodeID != "" {
		attached = "; attached by the controller on " + out.ControllerNodeID
	}
	s.cfg.Events.Printf("server", "volume %s claimed by %s on %s (%s, %s)%s",
		id, req.AllocationID, req.NodeID, req.Mode, resp.Claim.Capability(), attached)
	if req.Mount {
		s.cfg.Events.Printf("server", "asking %s to mount %s for %s", req.NodeID, id, req.AllocationID)
		var mr api.NodeMountResponse
		// resp.Volume holds the secrets the node plugin needs; it goes to
		// the claim's node only.
		err := s.transport.Call(ctx, req.NodeID, api.MethodMountVolume, &api.NodeMountRequest{Volume: resp.Volume, Claim: resp.Claim}, &mr)
		if err != nil {
			return nil, 0, fmt.Errorf("volume %s is claimed by %s but node %s could not mount it (retry the claim, or release the allocation to undo it): %w",
				id, req.AllocationID, req.NodeID, err)
		}
		out.Mount = &api.MountInfo{NodeID: req.NodeID, Path: mr.Path, Usage: mr.Usage}
		s.nodeExpandedAtMount(ctx, resp.Volume, req.NodeID, mr.NodeExpandedBytes)
		s.completeNodeExpansions(ctx, req.NodeID)
	}
	return out, out.Index, nil
}

// placeVolume answers which nodes can take a claim on the volume.
func (s *Server) placeVolume(w http.ResponseWriter, r *http.Request) (*api.PlaceResponse, uint64, error) {
	ns, id, req, err := volumeRequest[api.PlaceRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	for _, n := range req.Nodes {
		if err := csi.ValidateNodeID(n); err != nil {
			return nil, 0, err
		}
	}
	ctx := r.Context()
	idx, err := s.store().Index(state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	vol, err := s.api.Volume(ctx, ns, id)
	if err != nil {
		return nil, 0, err
	}
	if req.AccessMode == csi.AccessModeUnknown && req.AttachmentMode == csi.AttachmentModeUnknown {
		if len(vol.Capabilities) != 1 {
			return nil, 0, fmt.Errorf("%w: volume %s/%s allows %d capabilities (%v): name the access and attachment modes of the claim",
				csi.ErrInvalidRequest, ns, id, len(vol.Capabilities), vol.Capabilities)
		}
		req.AccessMode, req.AttachmentMode = vol.Capabilities[0].AccessMode, vol.Capabilities[0].AttachmentMode
	}
	if req.Namespace == "" {
		req.Namespace = ns
	}
	resp, err := s.api.Feasibility(ctx, &rpcshim.FeasibilityRequest{
		Namespace: ns, VolumeID: id, Nodes: req.Nodes,
		Claim: csi.PlacementRequest{Namespace: req.Namespace, Mode: req.Mode,
			Capability: csi.Capability{AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode}},
	})
	if err != nil {
		return nil, 0, err
	}
	resp.Nodes = orEmpty(resp.Nodes)
	return resp, idx, nil
}

// placeAllocation records a running allocation on node, unless it is
// already recorded there. A terminal allocation, or one on another node
// or namespace, is refused by the store.
func (s *Server) placeAllocation(ctx context.Context, allocID, ns, node string) error {
	a, err := s.store().Allocation(allocID)
	switch {
	case err == nil && !a.Terminal && a.NodeID == node && a.Namespace == ns:
		return nil
	case err != nil && !errors.Is(err, csi.ErrAllocationNotFound):
		return err
	}
	_, err = s.applier().Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: allocID, Namespace: ns, NodeID: node}}})
	if err != nil {
		return fmt.Errorf("place allocation %s on node %s: %w", allocID, node, err)
	}
	s.cfg.Events.Printf("server", "allocation %s placed on %s", allocID, node)
	return nil
}
