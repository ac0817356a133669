package rpcshim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// Claim claims a volume for an allocation and, for a new attachment,
// attaches it to the allocation's node. In order:
//
//  1. The claim is written (state.ClaimVolume through the applier),
//     which checks every claim rule. A refused claim calls no plugin.
//  2. When the plugin needs a controller and advertises
//     PUBLISH_UNPUBLISH_VOLUME (csi.Plugin.NeedsControllerPublish, over
//     the healthy controllers), the volume must be attached to the node:
//     if another claim of the volume on that node, live or still
//     attached (released but not ControllerDetached), holds a publish
//     context, it is copied onto this claim (for a new claim, in the
//     same transaction as step 1: a state.Batch of the claim and its
//     context, with no plugin call between them); otherwise
//     ControllerPublishVolume is called through the Router with the
//     claim's CSI node ID (filled by the store from the node plugin's
//     NodeInfo), and the returned publish context is stored on the claim
//     (state.SetPublishContext).
//  3. If ControllerPublishVolume fails with a Final error, nothing was
//     attached and the claim is removed again (state.RemoveClaim). A
//     Retryable or Uncertain error leaves the claim in place: retry the
//     same claim.
//
// A claim repeated by the same allocation is idempotent: if its publish
// context was stored it is returned at once, otherwise step 2 runs again.
// ControllerPublishVolume is idempotent in CSI, which is also why a claim
// publishes again rather than trusting an attachment whose context was
// never stored (an earlier claim's publish that did not complete looks
// the same as one whose plugin returned an empty context).
//
// ControllerPublishVolume is read-only exactly when the volume's access
// mode is read-only, not when the claim is a read claim: a node shares
// one attachment among all the claims there, and a later write claim
// must not inherit a read-only one.
//
// When the plugin requires a controller but none is healthy, whether the
// claim needs ControllerPublishVolume cannot be told: the claim is kept
// and the error matches csi.ErrNoController (Retryable).
func (s *Server) Claim(ctx context.Context, req *VolumeClaimRequest) (*VolumeClaimResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: claim volume: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("claim volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.Claim.AllocationID)
	unlock, err := s.lockVolume(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// A new claim on a volume that must be attached is decided on the
	// volume as read before the claim is written: the volume lock keeps
	// this Server's other operations out, and the claim itself is the
	// only change the write makes that the decision reads (it skips the
	// claim's own allocation). That lets a claim that shares an
	// attachment be written with its publish context in one transaction.
	if vol, err := s.store.Volume(req.Namespace, req.VolumeID); err == nil && vol.Claim(req.Claim.AllocationID) == nil {
		if needed, err := s.needsPublish(op, vol); err == nil && needed {
			return s.claimAttached(ctx, op, req, vol)
		}
	}

	res, err := s.applier.Apply(ctx, state.ClaimVolume{Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: req.Claim})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	claim, index := res.Claim, res.Index
	vol, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
	}
	if len(claim.PublishContext) > 0 {
		return &VolumeClaimResponse{Claim: claim, Volume: vol, Index: index}, nil
	}
	needed, err := s.needsPublish(op, vol)
	if err != nil {
		return nil, err
	}
	if !needed {
		return &VolumeClaimResponse{Claim: claim, Volume: vol, Index: index}, nil
	}
	return s.attach(ctx, op, req, vol, claim, index)
}

// claimAttached writes a new claim of vol, whose plugin needs
// ControllerPublishVolume (vol as read before the write). When another
// claim on the claim's node holds the attachment's publish context, the
// claim and a copy of that context are written together, in one
// state.Batch: no plugin call is made, and the claim never exists
// without its context. Otherwise the claim is written first and the
// volume attached (attach).
func (s *Server) claimAttached(ctx context.Context, op string, req *VolumeClaimRequest, vol *csi.Volume) (*VolumeClaimResponse, error) {
	claim := state.ClaimVolume{Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: req.Claim}
	if pc := attachedContext(vol, &req.Claim); pc != nil {
		res, err := s.applier.Apply(ctx, state.Batch{Commands: []state.Command{claim, state.SetPublishContext{
			Namespace: req.Namespace, VolumeID: req.VolumeID, AllocationID: req.Claim.AllocationID, PublishContext: pc,
		}}})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if vol, err = s.store.Volume(req.Namespace, req.VolumeID); err != nil {
			return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
		}
		c := vol.Claim(req.Claim.AllocationID).Copy()
		if c == nil {
			return nil, fmt.Errorf("%w: %s: the claim was written but is gone again (removed by another writer); retry the claim",
				csi.ErrUnavailable, op)
		}
		return &VolumeClaimResponse{Claim: c, Volume: vol, Index: res.Index}, nil
	}
	res, err := s.applier.Apply(ctx, claim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(res.Claim.PublishContext) > 0 {
		// Stored by another writer since the read: as for a repeated
		// claim, it is returned as it is.
		if vol, err = s.store.Volume(req.Namespace, req.VolumeID); err != nil {
			return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
		}
		return &VolumeClaimResponse{Claim: res.Claim, Volume: vol, Index: res.Index}, nil
	}
	return s.attach(ctx, op, req, vol, res.Claim, res.Index)
}

// attach gives a written claim its publish context: that of another
// claim on its node holding the attachment, or ControllerPublishVolume's
// (publish). It stores the context and returns the claim with the
// volume read back.
func (s *Server) attach(ctx context.Context, op string, req *VolumeClaimRequest, vol *csi.Volume, claim *csi.Claim, index uint64) (*VolumeClaimResponse, error) {
	var ctrlNode string
	pc := attachedContext(vol, claim)
	if pc == nil {
		var err error
		pc, ctrlNode, err = s.publish(ctx, op, vol, claim)
		if err != nil {
			return nil, err
		}
	}
	if len(pc) > 0 {
		res, err := s.applier.Apply(ctx, state.SetPublishContext{
			Namespace: req.Namespace, VolumeID: req.VolumeID, AllocationID: claim.AllocationID, PublishContext: pc,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: the volume is attached but storing its publish context failed (retry the claim): %w", op, err)
		}
		index = res.Index
		claim.PublishContext = maps.Clone(pc)
	}
	vol, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
	}
	return &VolumeClaimResponse{Claim: claim, Volume: vol, Index: index, ControllerNodeID: ctrlNode}, nil
}

// needsPublish decides whether claims of vol go through
// ControllerPublishVolume. It reads only the plugin's healthy controller
// instances (an index, through the router's view of it, which the
// ControllerPublish that follows uses too), not the whole plugin with
// its node instances.
func (s *Server) needsPublish(op string, vol *csi.Volume) (bool, error) {
	if !vol.ControllerRequired {
		return false, nil
	}
	ctrls, err := s.router.healthyControllers(vol.PluginID)
	if err != nil {
		return false, fmt.Errorf("%s: the claim is written but the plugin's controllers cannot be read (retry the claim): %w", op, err)
	}
	if len(ctrls) == 0 {
		return false, fmt.Errorf("%w: %s: plugin %s requires a controller but none is healthy, so whether the volume must be attached with ControllerPublishVolume is unknown; the claim is kept, retry it once a controller is healthy",
			csi.ErrNoController, op, vol.PluginID)
	}
	p := csi.Plugin{ID: vol.PluginID, ControllerRequired: true, Controllers: ctrls}
	return p.NeedsControllerPublish(), nil
}

// publish calls ControllerPublishVolume for claim and removes the claim
// again when that fails for good. It returns the publish context and the
// node whose controller served the call.
func (s *Server) publish(ctx context.Context, op string, vol *csi.Volume, claim *csi.Claim) (map[string]string, string, error) {
	r := &ControllerPublishRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: vol.PluginID},
		ControllerPublishRequest: plugin.ControllerPublishRequest{
			ExternalID:     vol.ExternalID,
			ExternalNodeID: claim.ExternalNodeID,
			Capability:     claim.Capability(),
			ReadOnly:       claim.AccessMode.ReadOnly(),
			Secrets:        vol.Secrets,
			VolumeContext:  vol.Context,
		},
	}
	if claim.AttachmentMode != csi.AttachmentModeBlockDevice {
		r.MountOptions = vol.MountOptions.Merge(claim.MountOptions)
	}
	resp, err := s.router.ControllerPublish(ctx, r)
	if err == nil {
		return resp.PublishContext, resp.ControllerNodeID, nil
	}
	class := csi.Classify(err)
	s.logger.Warn("ControllerPublishVolume failed for a claim", "namespace", vol.Namespace, "volume_id", vol.ID,
		"allocation_id", claim.AllocationID, "node_id", claim.NodeID, "class", class, "error", err)
	if class != csi.ClassFinal {
		return nil, "", fmt.Errorf("%s: the claim is kept, but attaching the volume to node %s did not complete; retry the claim: %w",
			op, claim.NodeID, err)
	}
	_, rerr := s.applier.Apply(ctx, state.RemoveClaim{Namespace: vol.Namespace, VolumeID: vol.ID, AllocationID: claim.AllocationID})
	if rerr != nil && !errors.Is(rerr, csi.ErrClaimNotFound) {
		return nil, "", fmt.Errorf("%s: attaching the volume to node %s failed: %w; removing the claim failed too (%v), so release the allocation's claim",
			op, claim.NodeID, err, rerr)
	}
	return nil, "", fmt.Errorf("%s: attaching the volume to node %s failed, so the claim was removed: %w", op, claim.NodeID, err)
}

// attachedContext returns the publish context of another claim of vol on
// claim's node that is live or still attached, or nil when none has one.
// Live claims are preferred, then by allocation ID, so the choice is
// stable.
func attachedContext(vol *csi.Volume, claim *csi.Claim) map[string]string {
	var live, past []*csi.Claim
	for _, m := range []map[string]*csi.Claim{vol.WriteClaims, vol.ReadClaims} {
		for _, c := range m {
			live = append(live, c)
		}
	}
	for _, c := range vol.PastClaims {
		if c.State < csi.ClaimControllerDetached {
			past = append(past, c)
		}
	}
	byAlloc := func(a, b *csi.Claim) int { return strings.Compare(a.AllocationID, b.AllocationID) }
	slices.SortFunc(live, byAlloc)
	slices.SortFunc(past, byAlloc)
	for _, c := range append(live, past...) {
		if c.AllocationID != claim.AllocationID && c.NodeID == claim.NodeID && len(c.PublishContext) > 0 {
			return maps.Clone(c.PublishContext)
		}
	}
	return nil
}

// Unpublish takes a node's report that it has unmounted a volume for a
// stopped allocation, so the claim is released now rather than when the
// host reports the allocation terminal. The claim must be on the
// reporting node (csi.ErrInvalidRequest otherwise). A live claim is
// released with state.ReleaseClaims, stamped with the Server's clock;
// note that this releases every live claim of the allocation, which has
// stopped. With NodeDetached set, the claim is checkpointed
// ClaimNodeDetached, so the release worker skips the node step. It never
// calls a plugin. A claim already freed is not an error: the response's
// Claim is nil.
func (s *Server) Unpublish(ctx context.Context, req *VolumeUnpublishRequest) (*VolumeUnpublishResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: unpublish volume: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("unpublish volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.AllocationID)
	if err := csi.ValidateAllocationID(req.AllocationID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := csi.ValidateNodeID(req.NodeID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	unlock, err := s.lockVolume(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	claim, err := s.claimOf(op, req)
	if err != nil || claim == nil {
		return &VolumeUnpublishResponse{}, err
	}
	if claim.NodeID != req.NodeID {
		return nil, fmt.Errorf("%w: %s: node %s reported it, but the claim is on node %s; only the claim's node can report its unmount",
			csi.ErrInvalidRequest, op, req.NodeID, claim.NodeID)
	}
	var index uint64
	if claim.State == csi.ClaimTaken {
		res, err := s.applier.Apply(ctx, state.ReleaseClaims{AllocationID: req.AllocationID, ReleasedAt: s.clock.Now()})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		index = res.Index
		claim.State = csi.ClaimUnpublishing
	}
	if req.NodeDetached && claim.State < csi.ClaimNodeDetached {
		res, err := s.applier.Apply(ctx, state.CheckpointClaim{
			Namespace: req.Namespace, VolumeID: req.VolumeID, AllocationID: req.AllocationID, State: csi.ClaimNodeDetached,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		index = res.Index
	}
	if claim, err = s.claimOf(op, req); err != nil {
		return nil, err
	}
	return &VolumeUnpublishResponse{Claim: claim, Index: index}, nil
}

// claimOf reads the request's claim, nil when it (or its volume) is gone.
func (s *Server) claimOf(op string, req *VolumeUnpublishRequest) (*csi.Claim, error) {
	v, err := s.store.Volume(req.Namespace, req.VolumeID)
	switch {
	case errors.Is(err, csi.ErrVolumeNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return v.Claim(req.AllocationID), nil
}
