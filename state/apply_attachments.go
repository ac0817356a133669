package state

import (
	"fmt"
	"maps"
	"strings"

	"github.com/csikit/csikit/csi"
)

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
