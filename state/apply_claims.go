// apply_claims.go owns taking a claim (ClaimVolume, and
// SetPublishContext, the older way to record a ControllerPublish) and
// the helpers every claim command uses to find and edit a claim. The
// release side is apply_releases.go; attachments, apply_attachments.go.
//
// Rules a reader must know:
//
//   - A claim sits in exactly one of its volume's maps: ReadClaims or
//     WriteClaims while its allocation runs, PastClaims once released.
//     claimMap finds it; keyed by allocation ID, so an allocation holds
//     at most one claim per volume.
//   - Claims are shared with readers of older states: edit a copy and
//     put it in an editable volume (editClaim), never change one in
//     place.
//   - The claim is written before any plugin call, and the volume's
//     attachment to the claim's node with the first claim there, in
//     the same transaction (addClaim). Attachments, not publish
//     contexts, say what is attached.
//   - ClaimVolume's checks run in the order its doc lists: the order
//     decides the error of a claim that breaks several rules, and
//     replicas must agree on it.

package state

import (
	"fmt"
	"time"

	"github.com/csikit/csikit/csi"
)

// validateClaimRef refuses a malformed reference to allocID's claim on
// a volume.
func validateClaimRef(ns, volID, allocID string) error {
	if err := validateVolumeRef(ns, volID); err != nil {
		return err
	}
	return csi.ValidateAllocationID(allocID)
}

// normalizeClaim stores a claim as a JSON round trip would read it
// back: times in UTC, empty mount flags as nil.
func normalizeClaim(c *csi.Claim) {
	normalizeMountOptions(c.MountOptions)
	c.ReleasedAt = c.ReleasedAt.UTC()
}

// claimMap returns the map of v holding allocID's claim, or nil. It
// returns the field's address so that the caller can tell a past claim
// (m == &v.PastClaims) and edit the map of an editable volume.
func claimMap(v *csi.Volume, allocID string) *map[string]*csi.Claim {
	for _, m := range []*map[string]*csi.Claim{&v.WriteClaims, &v.ReadClaims, &v.PastClaims} {
		if _, ok := (*m)[allocID]; ok {
			return m
		}
	}
	return nil
}

func claimNotFound(ns, volID, allocID string) error {
	return fmt.Errorf("%w: allocation %s holds no claim on volume %s", csi.ErrClaimNotFound, allocID, volName(ns, volID))
}

// claimOf reads a volume and allocID's claim on it, and whether the
// claim is past. Both are the stored rows: replace, never modify.
func (w *writer) claimOf(ns, volID, allocID string) (v *csi.Volume, c *csi.Claim, past bool, err error) {
	if err := validateClaimRef(ns, volID, allocID); err != nil {
		return nil, nil, false, err
	}
	if v, err = w.mustVolume(ns, volID); err != nil {
		return nil, nil, false, err
	}
	m := claimMap(v, allocID)
	if m == nil {
		return nil, nil, false, claimNotFound(ns, volID, allocID)
	}
	return v, (*m)[allocID], m == &v.PastClaims, nil
}

// editClaim finds allocID's claim on a volume and lets fn decide its
// fate: return a new claim to replace it, nil to remove it, or the same
// pointer to leave everything as it was.
func (w *writer) editClaim(ns, volID, allocID string, fn func(c *csi.Claim, past bool) (*csi.Claim, error)) error {
	v, old, past, err := w.claimOf(ns, volID, allocID)
	if err != nil {
		return err
	}
	nc, err := fn(old, past)
	if err != nil || nc == old {
		return err
	}
	nv := editable(v)
	m := claimMap(nv, allocID)
	if nc == nil {
		delete(*m, allocID)
	} else {
		normalizeClaim(nc)
		(*m)[allocID] = nc
	}
	return w.putVolume(nv)
}

// ClaimVolume checks the claim rules and writes the claim, and for the
// first claim on a node its attachment, in one transaction. The checks
// run in a fixed order, so that a claim that breaks several rules is
// refused with the same error on every replica:
//
//  1. the command is well formed (validClaim);
//  2. the volume exists and the allocation may claim it
//     (checkAllocation), and the volume is not being created;
//  3. a repeated claim stops here and changes nothing;
//  4. the plugin is schedulable and runs a healthy node instance on
//     the claim's node (nodeInstance), and the volume is reachable from
//     that instance's topology (csi.CheckTopology);
//  5. the volume's capabilities and free claims allow it
//     (csi.CheckClaim);
//  6. the claim carries the plugin's CSI node ID (externalNodeID);
//  7. a new attachment fits the node's MaxVolumes (checkMaxVolumes);
//
// and then addClaim writes it.
func (c ClaimVolume) apply(w *writer) error {
	claim, err := c.validClaim()
	if err != nil {
		return err
	}
	v, err := w.mustVolume(c.Namespace, c.VolumeID)
	if err != nil {
		return err
	}
	if err := w.checkAllocation(v, claim); err != nil {
		return err
	}
	if v.Creating {
		return fmt.Errorf("%w: volume %s is being created (the plugin has not answered CreateVolume yet); retry the claim once the creation completes",
			csi.ErrVolumeInUse, volName(v.Namespace, v.ID))
	}
	if v.Deleting {
		return fmt.Errorf("%w: volume %s is being deleted; a claim is taken again only if the delete fails and the plugin kept the volume",
			csi.ErrVolumeInUse, volName(v.Namespace, v.ID))
	}
	if csi.IsRepeatClaim(v, claim) {
		w.claim = v.Claim(claim.AllocationID).Copy()
		w.attachment = v.Attachments[claim.NodeID].Copy()
		return nil
	}
	p, ni, err := w.nodeInstance(v, claim.NodeID)
	if err != nil {
		return err
	}
	if err := csi.CheckTopology(v, claim.NodeID, ni.Topology()); err != nil {
		return fmt.Errorf("claim volume %s: %w", volName(v.Namespace, v.ID), err)
	}
	if err := csi.CheckClaim(v, claim); err != nil {
		return fmt.Errorf("claim volume %s: %w", volName(v.Namespace, v.ID), err)
	}
	if err := externalNodeID(v, p.ID, claim, ni); err != nil {
		return err
	}
	if err := w.checkMaxVolumes(v, claim.NodeID, ni); err != nil {
		return err
	}
	return w.addClaim(v, claim, p.ControllerRequired)
}

// validClaim returns a copy of the command's claim, which the write
// may fill in, once the command is well formed.
func (c ClaimVolume) validClaim() (*csi.Claim, error) {
	if err := validateVolumeRef(c.Namespace, c.VolumeID); err != nil {
		return nil, err
	}
	claim := c.Claim.Copy()
	if err := csi.ValidateClaim(claim); err != nil {
		return nil, fmt.Errorf("claim volume %s: %w", volName(c.Namespace, c.VolumeID), err)
	}
	if claim.ExternalNodeID != "" {
		if err := csi.ValidateExternalNodeID("external node ID", claim.ExternalNodeID); err != nil {
			return nil, fmt.Errorf("claim volume %s: %w", volName(c.Namespace, c.VolumeID), err)
		}
	}
	return claim, nil
}

// checkAllocation refuses a claim whose allocation is unknown, terminal,
// of another namespace than v, or placed on another node than the
// claim names.
func (w *writer) checkAllocation(v *csi.Volume, claim *csi.Claim) error {
	a, err := getAllocation(w.txn, claim.AllocationID)
	if err != nil {
		return err
	}
	if a != nil && !a.Terminal && a.Namespace == v.Namespace && a.NodeID == claim.NodeID {
		return nil
	}
	name := volName(v.Namespace, v.ID)
	switch {
	case a == nil:
		return fmt.Errorf("claim volume %s: %w", name, allocationNotFound(claim.AllocationID))
	case a.Terminal:
		return fmt.Errorf("%w: allocation %s is terminal and cannot claim volume %s; place a new allocation",
			csi.ErrAllocationTerminal, a.ID, name)
	case a.Namespace != v.Namespace:
		return fmt.Errorf("%w: allocation %s is in namespace %s and cannot claim volume %s; claim a volume of its own namespace",
			csi.ErrNamespaceMismatch, a.ID, a.Namespace, name)
	case a.NodeID != claim.NodeID:
		return fmt.Errorf("%w: claim on volume %s names node %s but allocation %s runs on node %s",
			csi.ErrInvalidRequest, name, claim.NodeID, a.ID, a.NodeID)
	}
	return nil
}

// nodeInstance returns v's plugin, refusing one that is missing or not
// schedulable, and what its node instance on node reported (nil when
// it reported no NodeInfo), refusing a missing or unhealthy instance.
func (w *writer) nodeInstance(v *csi.Volume, node string) (*csi.Plugin, *csi.NodeInfo, error) {
	p, err := getPlugin(w.txn, v.PluginID)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, nil, fmt.Errorf("claim volume %s: %w", volName(v.Namespace, v.ID), pluginNotFound(v.PluginID))
	}
	if !p.Schedulable() {
		return nil, nil, fmt.Errorf("%w: volume %s: plugin %s is not schedulable (%d healthy node instances, %d healthy controllers, controller required: %t); wait for healthy plugin instances",
			csi.ErrPluginUnhealthy, volName(v.Namespace, v.ID), p.ID, p.NodesHealthy, p.ControllersHealthy, p.ControllerRequired)
	}
	in, err := getInstance(w.txn, p.ID, csi.PluginTypeNode, node)
	if err != nil {
		return nil, nil, err
	}
	if in == nil {
		return nil, nil, fmt.Errorf("%w: volume %s: plugin %s has no node instance on node %s; run its node plugin there or place the allocation elsewhere",
			csi.ErrPluginNotFound, volName(v.Namespace, v.ID), p.ID, node)
	}
	if !in.Info.Healthy {
		return nil, nil, fmt.Errorf("%w: volume %s: the node instance of plugin %s on node %s is unhealthy (%s); wait for it to recover",
			csi.ErrPluginUnhealthy, volName(v.Namespace, v.ID), p.ID, node, in.Info.HealthDescription)
	}
	return p, in.Info.NodeInfo, nil
}

// externalNodeID fills in the claim's CSI node ID from what the node
// instance of plugin reported, ni, unless the claim names one: the
// claim flow passes it to ControllerPublishVolume. A node instance that
// reported none cannot be published to yet.
func externalNodeID(v *csi.Volume, plugin string, claim *csi.Claim, ni *csi.NodeInfo) error {
	if claim.ExternalNodeID != "" {
		return nil
	}
	if ni == nil || ni.ID == "" {
		return fmt.Errorf("%w: volume %s: the node instance of plugin %s on node %s reported no CSI node ID; wait for its next fingerprint",
			csi.ErrPluginUnhealthy, volName(v.Namespace, v.ID), plugin, claim.NodeID)
	}
	claim.ExternalNodeID = ni.ID
	return nil
}

// checkMaxVolumes refuses a claim that would attach v to node when the
// node instance there (ni) already has MaxVolumes volumes of v's plugin
// attached. Attachments count in every state, Attaching and Detaching
// too, since the plugin may hold the volume until the detach is done;
// a claim that joins an existing attachment adds none and always fits.
func (w *writer) checkMaxVolumes(v *csi.Volume, node string, ni *csi.NodeInfo) error {
	if v.Attachments[node] != nil || ni == nil || ni.MaxVolumes <= 0 {
		return nil
	}
	// The attachment keys alone count: no volume is read.
	it, err := w.txn.Get(tRefs, iID, tVolumes, refAttached, node, v.PluginID)
	if err != nil {
		return dbErr("count volumes on node", err)
	}
	var n int64
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	if n >= ni.MaxVolumes {
		return fmt.Errorf("%w: node %s has %d volumes of plugin %s attached, its limit is %d; cannot attach volume %s until one is released, or place the allocation elsewhere",
			csi.ErrMaxVolumes, node, n, v.PluginID, ni.MaxVolumes, volName(v.Namespace, v.ID))
	}
	return nil
}

// addClaim writes claim, checked, as a live claim of v: taken, with no
// release time or error left from a command that set them. The first
// claim on a node makes the volume's attachment there, in this
// transaction: Attached at once when the plugin needs no controller to
// publish through, Attaching otherwise until the claim flow has called
// ControllerPublishVolume (or found it is not needed) and written
// AttachVolume. A later claim joins the attachment as it is.
func (w *writer) addClaim(v *csi.Volume, claim *csi.Claim, controllerRequired bool) error {
	claim.State = csi.ClaimTaken
	claim.ReleasedAt = time.Time{}
	claim.LastError = ""
	normalizeClaim(claim)
	nv := editable(v)
	m := &nv.ReadClaims
	if claim.Mode == csi.ClaimWrite {
		m = &nv.WriteClaims
	}
	if *m == nil {
		*m = map[string]*csi.Claim{}
	}
	(*m)[claim.AllocationID] = claim
	att := nv.Attachments[claim.NodeID]
	if att == nil {
		att = &csi.Attachment{NodeID: claim.NodeID, ExternalNodeID: claim.ExternalNodeID,
			State: csi.AttachmentAttaching, CreateIndex: w.index, ModifyIndex: w.index}
		if !controllerRequired {
			att.State = csi.AttachmentAttached
		}
		if nv.Attachments == nil {
			nv.Attachments = map[string]*csi.Attachment{}
		}
		nv.Attachments[claim.NodeID] = att
	}
	if err := w.putVolume(nv); err != nil {
		return err
	}
	w.claim = claim.Copy()
	w.attachment = att.Copy()
	return nil
}

// SetPublishContext is AttachVolume for the node of the allocation's
// claim: it marks that attachment Attached with the context.
func (c SetPublishContext) apply(w *writer) error {
	_, cl, _, err := w.claimOf(c.Namespace, c.VolumeID, c.AllocationID)
	if err != nil {
		return err
	}
	return AttachVolume{Namespace: c.Namespace, VolumeID: c.VolumeID, NodeID: cl.NodeID, PublishContext: c.PublishContext}.apply(w)
}
