// health_drift.go owns the commands with which the health monitor
// brings the attachment records back in line with what the backend
// reports (LIST_VOLUMES_PUBLISHED_NODES): a record whose attachment the
// backend lost is flagged so that the next claim publishes it again,
// and an attachment the backend has without any record is adopted as
// Detaching, so that it is detached the way a release detaches
// (ControllerUnpublishVolume, then RemoveAttachment).
//
// Rules a reader must know:
//
//   - Adopting never takes an attachment a claim wants: it is refused
//     while the volume has any record or any claim, live or past, on
//     the node, which is how an attach in flight (its claim and
//     Attaching record are written before ControllerPublishVolume) is
//     never undone.
//   - Flagging only moves Attached back to Attaching, the state a claim
//     publishes from; a Detaching record is left to its release.

package state

import (
	"fmt"

	"github.com/csikit/csikit/csi"
)

// The kinds of the drift commands.
const (
	KindFlagAttachmentVanished Kind = "flag-attachment-vanished"
	KindAdoptAttachment        Kind = "adopt-attachment"
)

// FlagAttachmentVanished records that the backend no longer has the
// attachment of the volume to NodeID: an Attached record goes back to
// Attaching, so the next claim on the node (rpcshim's claim flow, a
// repeated claim too) calls ControllerPublishVolume again. An Attaching
// or Detaching record is left as it is (Result.Changed false); none at
// all is csi.ErrAttachmentNotFound.
type FlagAttachmentVanished struct {
	Namespace string
	VolumeID  string
	NodeID    string
}

// Kind implements Command.
func (FlagAttachmentVanished) Kind() Kind { return KindFlagAttachmentVanished }

func (c FlagAttachmentVanished) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	switch {
	case err != nil:
		return err
	case a == nil:
		return attachmentNotFound(c.Namespace, c.VolumeID, c.NodeID)
	case a.State != csi.AttachmentAttached:
		return nil
	}
	na := a.Copy()
	na.State = csi.AttachmentAttaching
	na.PublishContext = nil
	return w.putAttachment(v, c.NodeID, na)
}

// AdoptAttachment records an attachment the backend has and csikit does
// not (a leak: attached out of band, or by a CO that forgot it) as
// Detaching to NodeID with the backend's CSI node ID, so that it is
// detached through the release path: ControllerUnpublishVolume, then
// RemoveAttachment. While the record exists a claim on the node is
// refused as retryable, as during any detach. It is refused with
// csi.ErrVolumeInUse when the volume already has a record, or any claim
// live or past, on the node: then the attachment is wanted, or is being
// released, and is not a leak.
type AdoptAttachment struct {
	Namespace      string
	VolumeID       string
	NodeID         string
	ExternalNodeID string
}

// Kind implements Command.
func (AdoptAttachment) Kind() Kind { return KindAdoptAttachment }

func (c AdoptAttachment) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	if err != nil {
		return err
	}
	if err := csi.ValidateExternalNodeID("CSI node ID", c.ExternalNodeID); err != nil {
		return err
	}
	if a != nil {
		return fmt.Errorf("%w: volume %s has an attachment record to node %s (%s); it is not a leak",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), c.NodeID, a.State)
	}
	if claimOnNode(v, c.NodeID) {
		return fmt.Errorf("%w: volume %s has a claim on node %s; its attachment is not a leak",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), c.NodeID)
	}
	return w.putAttachment(v, c.NodeID, &csi.Attachment{NodeID: c.NodeID, ExternalNodeID: c.ExternalNodeID,
		State: csi.AttachmentDetaching, CreateIndex: w.index})
}

// claimOnNode reports whether any claim of v, live or past in any
// state, is on node.
func claimOnNode(v *csi.Volume, node string) bool {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == node {
				return true
			}
		}
	}
	return false
}
