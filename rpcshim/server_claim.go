package rpcshim

import (
	"context"
	"errors"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// Claim claims a volume for an allocation and, for a new attachment,
// attaches it to the allocation's node. In order:
//
//  1. The claim is written (state.ClaimVolume through the applier),
//     which checks every claim rule in the store transaction and, in
//     the same transaction, joins the volume's attachment to the node
//     or makes a new one (see csi.Attachment). A refused claim calls no
//     plugin; a claim on a node the volume is being detached from is
//     refused as Retryable (csi.ErrVolumeInUse).
//  2. If the attachment is Attached, the claim is done: no plugin call,
//     whatever its publish context (the spec lets a plugin return
//     none).
//  3. Otherwise (Attaching: new, or an earlier publish that did not
//     complete), when the plugin advertises PUBLISH_UNPUBLISH_VOLUME
//     over its healthy controllers (csi.Plugin.NeedsControllerPublish),
//     ControllerPublishVolume is called through the Router with the
//     attachment's CSI node ID; then state.AttachVolume records the
//     attachment Attached with the returned publish context. A plugin
//     that needs no publish gets the record without a call.
//  4. If ControllerPublishVolume fails with a Final error, nothing was
//     attached and the claim is removed again (state.RemoveClaim, which
//     drops the Attaching record with the node's last claim). A
//     Retryable or Uncertain error leaves the claim in place: retry the
//     same claim.
//
// A claim repeated by the same allocation is idempotent: step 1 writes
// nothing and steps 2 and 3 run as for a first claim, so a repeat
// completes an attachment that an earlier call left Attaching.
// ControllerPublishVolume is idempotent in CSI.
//
// ControllerPublishVolume is read-only exactly when the volume's access
// mode is read-only, not when the claim is a read claim: a node shares
// one attachment among all the claims there, and a later write claim
// must not inherit a read-only one.
//
// When the plugin requires a controller but none is healthy, whether the
// claim needs ControllerPublishVolume cannot be told: the claim is kept
// (its attachment Attaching) and the error matches csi.ErrNoController
// (Retryable).
func (s *Server) Claim(ctx context.Context, req *VolumeClaimRequest) (*VolumeClaimResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: claim volume: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("claim volume %s/%s for allocation %s", req.Namespace, req.VolumeID, req.Claim.AllocationID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeClaim); err != nil {
		return nil, err
	}
	unlock, err := s.lockVolume(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()

	res, err := s.applier.Apply(ctx, state.ClaimVolume{Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: req.Claim})
	s.countClaim(res, err)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	claim, att, index := res.Claim, res.Attachment, res.Index
	if claim == nil || att == nil {
		return nil, fmt.Errorf("%w: %s: the store wrote the claim but returned no claim or attachment; is the Applier passing state.Result on?",
			csi.ErrUnavailable, op)
	}
	var ctrlNode string
	if att.State != csi.AttachmentAttached {
		vol, err := s.store.Volume(req.Namespace, req.VolumeID)
		if err != nil {
			return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
		}
		needed, err := s.needsPublish(op, vol)
		if err != nil {
			return nil, err
		}
		var pc map[string]string
		if needed {
			if pc, ctrlNode, err = s.publish(ctx, op, vol, claim, att); err != nil {
				return nil, err
			}
		}
		res, err := s.applier.Apply(ctx, state.AttachVolume{
			Namespace: req.Namespace, VolumeID: req.VolumeID, NodeID: claim.NodeID, PublishContext: pc,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: the volume is attached to node %s but recording it failed (retry the claim): %w", op, claim.NodeID, err)
		}
		index = max(index, res.Index)
	}
	vol, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return nil, fmt.Errorf("%s: the claim is written but reading the volume back failed (retry the claim): %w", op, err)
	}
	att = vol.Attachments[claim.NodeID]
	if vol.Claim(claim.AllocationID) == nil || att == nil || att.State != csi.AttachmentAttached {
		return nil, fmt.Errorf("%w: %s: the claim or its attachment to node %s changed under it (released by another writer); retry the claim",
			csi.ErrUnavailable, op, claim.NodeID)
	}
	return &VolumeClaimResponse{Claim: claim, Attachment: att.Copy(), Volume: vol, Index: index, ControllerNodeID: ctrlNode}, nil
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

// publish calls ControllerPublishVolume for claim's attachment and
// removes the claim again when that fails for good. It returns the
// publish context and the node whose controller served the call.
func (s *Server) publish(ctx context.Context, op string, vol *csi.Volume, claim *csi.Claim, att *csi.Attachment) (map[string]string, string, error) {
	r := &ControllerPublishRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: vol.PluginID},
		ControllerPublishRequest: plugin.ControllerPublishRequest{
			ExternalID:     vol.ExternalID,
			ExternalNodeID: att.ExternalNodeID,
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
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeClaim); err != nil {
		return nil, err
	}
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
	// The release and the checkpoint go in one write: once the claim is
	// past, the release worker may free it at any time, and a
	// checkpoint written after that would find no claim.
	var cmds []state.Command
	if claim.State == csi.ClaimTaken {
		cmds = append(cmds, state.ReleaseClaims{AllocationID: req.AllocationID, ReleasedAt: s.clock.Now()})
	}
	if req.NodeDetached && claim.State < csi.ClaimNodeDetached {
		cmds = append(cmds, state.CheckpointClaim{
			Namespace: req.Namespace, VolumeID: req.VolumeID, AllocationID: req.AllocationID, State: csi.ClaimNodeDetached,
		})
	}
	var index uint64
	switch len(cmds) {
	case 0:
	case 1:
		res, err := s.applier.Apply(ctx, cmds[0])
		if errors.Is(err, csi.ErrClaimNotFound) {
			// Freed by the release worker since the read: done.
			return &VolumeUnpublishResponse{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		index = res.Index
	default:
		res, err := s.applier.Apply(ctx, state.Batch{Commands: cmds})
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
