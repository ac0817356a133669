package mounter

import (
	"cmp"
	"fmt"
	"maps"

	"github.com/csikit/csikit/csi"
)

// MountRequest asks to make a volume available to one allocation on this
// node. The mounter copies what it needs.
type MountRequest struct {
	// Namespace and VolumeID are csikit's identity of the volume; with
	// AllocationID they are the only caller values used in paths.
	Namespace, VolumeID, AllocationID string
	// ExternalID is the plugin's CSI volume ID, PluginID the node plugin
	// that serves it.
	ExternalID, PluginID string
	// Capability is the (access, attachment) pair of the claim; ClaimMode
	// decides the publish's read-only flag (read claims are read-only).
	Capability csi.Capability
	ClaimMode  csi.ClaimMode
	// MountOptions (fs type, mount flags, mount group) go with a
	// file-system attachment; they must be unset for a block device.
	MountOptions *csi.MountOptions
	// Secrets are passed to NodeStageVolume and NodePublishVolume. They
	// never reach a log, an error or the state directory.
	Secrets csi.Secrets
	// VolumeContext is the volume context from CreateVolume.
	VolumeContext map[string]string
	// PublishContext is what ControllerPublishVolume returned for this
	// node, if it was called.
	PublishContext map[string]string
	// NodeExpansion, if set, is an expansion this node owes the volume
	// (see NodeExpansion).
	NodeExpansion *NodeExpansion
}

// NewMountRequest builds the request that mounts volume v for the claim
// c: the claim's mount options override the volume's, and the publish
// context comes from the volume's attachment to the claim's node (none
// when there is no attachment or its context is empty). A block-device
// claim gets no mount options. It validates the result.
func NewMountRequest(v *csi.Volume, c *csi.Claim) (*MountRequest, error) {
	if v == nil || c == nil {
		return nil, fmt.Errorf("%w: NewMountRequest needs a volume and a claim", csi.ErrInvalidRequest)
	}
	r := &MountRequest{
		Namespace:     v.Namespace,
		VolumeID:      v.ID,
		ExternalID:    v.ExternalID,
		PluginID:      v.PluginID,
		AllocationID:  c.AllocationID,
		Capability:    c.Capability(),
		ClaimMode:     c.Mode,
		Secrets:       v.Secrets.Copy(),
		VolumeContext: maps.Clone(v.Context),
	}
	if a := v.Attachments[c.NodeID]; a != nil {
		r.PublishContext = maps.Clone(a.PublishContext)
	}
	if c.AttachmentMode != csi.AttachmentModeBlockDevice {
		r.MountOptions = v.MountOptions.Merge(c.MountOptions)
	}
	if e := v.Expansion; e.NeedsNode(c.NodeID) {
		r.NodeExpansion = &NodeExpansion{RequiredBytes: e.RequiredBytes, LimitBytes: e.LimitBytes}
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Usage returns the request's usage.
func (r *MountRequest) Usage() Usage { return UsageOf(r.ClaimMode, r.Capability) }

// Validate checks the request without doing anything: valid IDs (the
// error matches csi.ErrInvalidID), a defined usage, no mount options on a
// block device.
func (r *MountRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("%w: nil mount request", csi.ErrInvalidRequest)
	}
	if err := cmp.Or(validateTriple(r.Namespace, r.VolumeID, r.AllocationID), csi.ValidatePluginID(r.PluginID),
		csi.ValidateExternalID("external volume ID", r.ExternalID), r.Usage().Validate()); err != nil {
		return err
	}
	mo := r.MountOptions
	if r.Capability.AttachmentMode == csi.AttachmentModeBlockDevice &&
		mo != nil && (mo.FSType != "" || len(mo.MountFlags) > 0 || mo.VolumeMountGroup != "") {
		return fmt.Errorf("%w: volume %s is claimed as a block device, which takes no mount options; pass nil MountOptions",
			csi.ErrInvalidRequest, r.VolumeID)
	}
	return nil
}

// UnmountRequest asks to undo the mounts of a volume for one allocation.
// The plugin, external ID and paths come from the mounter's persisted
// state, so an unmount works after a restart of the node agent.
type UnmountRequest struct {
	Namespace, VolumeID, AllocationID string
	// Usage selects one usage of the volume. The zero Usage means every
	// usage the allocation has (an allocation has at most one claim per
	// volume, so usually one).
	Usage Usage
}

// NewUnmountRequest builds the request that undoes the mount of volume
// (namespace, volumeID) for the claim c.
func NewUnmountRequest(namespace, volumeID string, c *csi.Claim) *UnmountRequest {
	r := &UnmountRequest{Namespace: namespace, VolumeID: volumeID}
	if c != nil {
		r.AllocationID = c.AllocationID
		r.Usage = UsageOf(c.Mode, c.Capability())
	}
	return r
}

// Validate checks the request's IDs (the error matches csi.ErrInvalidID)
// and, when set, its usage.
func (r *UnmountRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("%w: nil unmount request", csi.ErrInvalidRequest)
	}
	if err := validateTriple(r.Namespace, r.VolumeID, r.AllocationID); err != nil || r.Usage.IsZero() {
		return err
	}
	return r.Usage.Validate()
}

// MountInfo says where a mounted volume is.
type MountInfo struct {
	// Path is the published target: a directory for a file-system
	// attachment, a device file for a block device.
	Path string
	// Block is true when Path is a device file.
	Block bool
	Usage Usage
	// NodeExpandedBytes is the capacity NodeExpandVolume reported when
	// this mount staged the volume and ran the request's NodeExpansion;
	// 0 when it did not (the host's CompleteNodeExpansions runs it).
	NodeExpandedBytes int64 `json:",omitempty"`
}

func validateTriple(namespace, volumeID, allocID string) error {
	return cmp.Or(csi.ValidateNamespace(namespace), csi.ValidateVolumeID(volumeID), csi.ValidateAllocationID(allocID))
}
