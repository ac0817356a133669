// apply_attachments.go owns a volume's attachment records, one per
// node it is attached to (csi.Volume.Attachments): AttachVolume after
// ControllerPublishVolume, DetachVolume before ControllerUnpublishVolume,
// RemoveAttachment after it. ClaimVolume makes an attachment with the
// first claim on a node (apply_claims.go).
//
// Rules a reader must know:
//
//   - The states go one way: Attaching (claimed, not published yet),
//     Attached, Detaching (unpublish under way), then removed. A
//     Detaching attachment is never attached again: the claims that
//     wanted it must claim anew once it is gone.
//   - An attachment is detached and removed only when no claim on its
//     node still needs it (heldOn): the claim release worker frees its
//     own claim and leaves the attachment to the claims that remain.
//   - "Attached" is the State, never inferred from a publish context,
//     which may be empty.
//   - An attachment lives inside its volume's row: changing one writes
//     the volume (putAttachment), so every rule of apply_volumes.go
//     holds, replace-never-modify included.

package state

import (
	"fmt"
	"maps"
	"strings"

	"github.com/csikit/csikit/csi"
)

// attachmentNotFound is the error for a volume not attached to node.
func attachmentNotFound(ns, volID, node string) error {
	return fmt.Errorf("%w: volume %s has no attachment to node %s (not claimed there, or already detached)",
		csi.ErrAttachmentNotFound, volName(ns, volID), node)
}

// attachmentOf reads the volume and its attachment to node (nil when
// there is none).
func (w *writer) attachmentOf(ns, volID, node string) (*csi.Volume, *csi.Attachment, error) {
	if err := validateVolumeRef(ns, volID); err != nil {
		return nil, nil, err
	}
	if err := csi.ValidateNodeID(node); err != nil {
		return nil, nil, err
	}
	v, err := w.mustVolume(ns, volID)
	if err != nil {
		return nil, nil, err
	}
	return v, v.Attachments[node], nil
}

// putAttachment writes a (new copy of an) attachment of v, or removes
// the one to node when a is nil.
func (w *writer) putAttachment(v *csi.Volume, node string, a *csi.Attachment) error {
	nv := editable(v)
	if a == nil {
		delete(nv.Attachments, node)
	} else {
		a.PublishContext = nilIfEmpty(a.PublishContext)
		a.ModifyIndex = w.index
		if nv.Attachments == nil {
			nv.Attachments = map[string]*csi.Attachment{}
		}
		nv.Attachments[node] = a
	}
	return w.putVolume(nv)
}

// heldOn refuses a detach of v from node while a claim there still needs
// the volume attached (csi.Volume.ClaimsOnNode).
func heldOn(v *csi.Volume, node string) error {
	if ids := v.ClaimsOnNode(node, ""); len(ids) > 0 {
		return fmt.Errorf("%w: volume %s stays attached to node %s: allocation %s still holds it there",
			csi.ErrVolumeInUse, volName(v.Namespace, v.ID), node, strings.Join(ids, ", "))
	}
	return nil
}

// AttachVolume marks the attachment Attached with the plugin's publish
// context; repeating it with the same context changes nothing.
func (c AttachVolume) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	switch {
	case err != nil:
		return err
	case a == nil:
		return fmt.Errorf("%w; claim the volume again", attachmentNotFound(c.Namespace, c.VolumeID, c.NodeID))
	case a.State == csi.AttachmentDetaching:
		return fmt.Errorf("%w: volume %s is being detached from node %s, its claims there were released; claim it again once the release finishes",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), c.NodeID)
	case a.State == csi.AttachmentAttached && maps.Equal(a.PublishContext, c.PublishContext):
		return nil
	}
	na := a.Copy()
	na.State = csi.AttachmentAttached
	na.PublishContext = maps.Clone(c.PublishContext)
	return w.putAttachment(v, c.NodeID, na)
}

// DetachVolume marks the attachment Detaching, which it stays until
// RemoveAttachment, so that no new claim joins it while the plugin
// unpublishes.
func (c DetachVolume) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	switch {
	case err != nil:
		return err
	case a == nil:
		return attachmentNotFound(c.Namespace, c.VolumeID, c.NodeID)
	case a.State == csi.AttachmentDetaching:
		return nil
	}
	if err := heldOn(v, c.NodeID); err != nil {
		return err
	}
	na := a.Copy()
	na.State = csi.AttachmentDetaching
	return w.putAttachment(v, c.NodeID, na)
}

// RemoveAttachment deletes the attachment; one already gone is a no-op,
// so that a release resumed after a crash may repeat it.
func (c RemoveAttachment) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	if err != nil || a == nil {
		return err
	}
	if err := heldOn(v, c.NodeID); err != nil {
		return err
	}
	return w.putAttachment(v, c.NodeID, nil)
}
