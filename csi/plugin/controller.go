package plugin

import (
	"context"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// ControllerPublishRequest asks the controller to make a volume
// available on a node (attach a disk, export a share).
type ControllerPublishRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
	// ExternalNodeID is the node plugin's CSI node ID (NodeGetInfo), not
	// the host's node ID. Required.
	ExternalNodeID string
	Capability     csi.Capability
	// MountOptions go with a file-system Capability; nil for block.
	MountOptions  *csi.MountOptions
	ReadOnly      bool
	Secrets       csi.Secrets
	VolumeContext map[string]string
}

// ControllerUnpublishRequest undoes a ControllerPublishVolume.
type ControllerUnpublishRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
	// ExternalNodeID is the node to detach from; empty means every node.
	ExternalNodeID string
	Secrets        csi.Secrets
}

// ValidateCapabilitiesRequest asks whether a volume supports
// capabilities.
type ValidateCapabilitiesRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
	// Capabilities to confirm; at least one.
	Capabilities []csi.Capability
	// MountOptions go with every file-system capability.
	MountOptions      *csi.MountOptions
	VolumeContext     map[string]string
	Parameters        map[string]string
	MutableParameters map[string]string
	Secrets           csi.Secrets
}

// ValidateCapabilitiesResponse is the plugin's answer. Confirmed is false
// when the plugin did not confirm the capabilities; Message may say why.
type ValidateCapabilitiesResponse struct {
	Confirmed bool
	// Capabilities are the capabilities the plugin confirmed.
	Capabilities []csi.Capability
	Message      string
}

// CreateVolumeRequest asks the controller to provision a volume.
type CreateVolumeRequest struct {
	// Name identifies the volume for idempotent retries. Required.
	Name string
	// CapacityMin and CapacityMax bound the size in bytes; 0 is no bound.
	CapacityMin  int64
	CapacityMax  int64
	Capabilities []csi.Capability
	// MountOptions go with every file-system capability.
	MountOptions      *csi.MountOptions
	Parameters        map[string]string
	MutableParameters map[string]string
	Secrets           csi.Secrets
	// Source, if set, pre-populates the volume from a snapshot or volume.
	Source *ContentSource
	// Topology constrains where the volume is placed.
	Topology *csi.TopologyRequest
}

// ContentSource names a snapshot or a volume (by plugin ID) to copy
// from; exactly one field is set. It is csi.ContentSource, which a
// volume's record keeps.
type ContentSource = csi.ContentSource

// Volume is a volume as the controller reports it (CreateVolume,
// ListVolumes).
type Volume struct {
	// ExternalID is the plugin's volume ID.
	ExternalID string
	// Capacity in bytes; 0 means unknown.
	Capacity int64
	// Context is passed back to every node call for the volume.
	Context    map[string]string
	Source     *ContentSource
	Topologies []*csi.Topology
}

// DeleteVolumeRequest asks the controller to delete a volume.
type DeleteVolumeRequest struct {
	ExternalID string
	Secrets    csi.Secrets
}

// ListVolumesRequest pages through the plugin's volumes.
type ListVolumesRequest struct {
	// MaxEntries caps the page; 0 lets the plugin choose.
	MaxEntries int32
	// StartingToken is the NextToken of the previous page, or empty.
	StartingToken string
}

// ListVolumesResponse is one page of volumes.
type ListVolumesResponse struct {
	Entries []VolumeEntry
	// NextToken continues the listing; empty on the last page.
	NextToken string
}

// VolumeEntry is one listed volume.
type VolumeEntry struct {
	Volume Volume
	// PublishedNodeIDs are the CSI node IDs the volume is published to
	// (LIST_VOLUMES_PUBLISHED_NODES).
	PublishedNodeIDs []string
	// Condition is the volume's health from a plugin built on CSI 1.3
	// to 1.12 that advertises VOLUME_CONDITION (field 2 of the entry's
	// status, removed in 1.13); nil when it sent none.
	Condition *VolumeCondition
}

// ControllerExpandRequest asks the controller to grow a volume.
type ControllerExpandRequest struct {
	ExternalID string
	// CapacityMin and CapacityMax bound the new size; at least one is set.
	CapacityMin int64
	CapacityMax int64
	// Capability, if set, is how the volume is used.
	Capability   *csi.Capability
	MountOptions *csi.MountOptions
	Secrets      csi.Secrets
}

// ControllerExpandResponse is the result of ControllerExpandVolume.
type ControllerExpandResponse struct {
	// Capacity is the new size in bytes.
	Capacity int64
	// NodeExpansionRequired: call NodeExpandVolume on the node next.
	NodeExpansionRequired bool
}

// CreateSnapshotRequest asks the controller to snapshot a volume.
type CreateSnapshotRequest struct {
	// SourceID is the plugin's ID of the volume to snapshot. Required.
	SourceID string
	// Name identifies the snapshot for idempotent retries. Required.
	Name       string
	Parameters map[string]string
	Secrets    csi.Secrets
}

// Snapshot is a snapshot as the controller reports it.
type Snapshot struct {
	// ID is the plugin's snapshot ID.
	ID string
	// SourceID is the plugin's ID of the snapshotted volume.
	SourceID string
	// Size in bytes; 0 means unknown.
	Size            int64
	CreateTime      time.Time
	ReadyToUse      bool
	GroupSnapshotID string
	Topologies      []*csi.Topology
}

// DeleteSnapshotRequest asks the controller to delete a snapshot.
type DeleteSnapshotRequest struct {
	ID      string
	Secrets csi.Secrets
}

// ListSnapshotsRequest pages through snapshots, optionally filtered by
// source volume or snapshot ID.
type ListSnapshotsRequest struct {
	MaxEntries    int32
	StartingToken string
	SourceID      string
	ID            string
	Secrets       csi.Secrets
}

// ListSnapshotsResponse is one page of snapshots.
type ListSnapshotsResponse struct {
	Entries   []Snapshot
	NextToken string
}

// GetCapacityRequest asks how much storage the controller can still
// provision. Every field is optional; a nil request asks for the
// plugin's whole capacity.
type GetCapacityRequest struct {
	// Capabilities, if any, are those the volumes would be created
	// with: the plugin counts only storage that can carry them.
	Capabilities []csi.Capability
	// MountOptions go with every file-system capability.
	MountOptions *csi.MountOptions
	// Parameters are the CreateVolume parameters of the volumes (their
	// class, a storage class's parameters in Kubernetes terms).
	Parameters map[string]string
	// Topology, if set, asks for the capacity of volumes accessible from
	// it, one topology segment set such as {"zone": "a"}; nil asks for
	// the capacity of volumes accessible from anywhere the plugin
	// provisions.
	Topology *csi.Topology
}

// GetCapacityResponse is the controller's capacity for one
// GetCapacityRequest.
type GetCapacityResponse struct {
	// Available is the storage, in bytes, that can be used to provision
	// volumes of the request's parameters, capabilities and topology.
	// The spec makes it required, so 0 means none is left.
	Available int64
	// MaximumVolumeSize is the largest CapacityMax (limit_bytes) a
	// CreateVolume of the same request may ask for, and MinimumVolumeSize
	// the smallest CapacityMin (required_bytes). The spec makes both
	// optional: nil means the plugin did not report it, which is not a
	// limit of 0. Without MaximumVolumeSize, Available is the only bound
	// known; without MinimumVolumeSize, any size down to 0 may do.
	MaximumVolumeSize *int64
	MinimumVolumeSize *int64
}

// ControllerGetVolumeRequest asks the controller for one volume
// (GET_VOLUME).
type ControllerGetVolumeRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
}

// ControllerGetVolumeResponse is a volume as the controller reports it
// now, with its status where the plugin reports one.
type ControllerGetVolumeResponse struct {
	Volume Volume
	// Status is nil when the plugin sent no status.
	Status *VolumeStatus
}

// VolumeStatus is the controller's view of a volume's use and health.
type VolumeStatus struct {
	// PublishedNodeIDs are the CSI node IDs the volume is controller
	// published to. The spec lets the list name nodes the CO does not
	// know, and it is empty when the plugin does not track them: compare
	// it with the CO's attachment records only where the plugin
	// advertises LIST_VOLUMES_PUBLISHED_NODES.
	PublishedNodeIDs []string
	// Condition is nil when the plugin reported none. CSI 1.13 removed
	// the field (an alpha field, number 2 of the status, now reserved)
	// in favour of the volume health RPCs, but plugins built on spec
	// 1.3 to 1.12 that advertise VOLUME_CONDITION still send it, and
	// the Client reads it from the reply's unknown fields.
	Condition *VolumeCondition
}

// VolumeCondition is the health a plugin reported for a volume.
type VolumeCondition struct {
	// Abnormal is true when the volume is not healthy (for example its
	// back-end disk is gone or read-only).
	Abnormal bool
	// Message describes the condition, in the plugin's words.
	Message string
}

// ControllerPublishVolume attaches a volume to a node and returns the
// publish context to pass to the node calls.
func (c *Client) ControllerPublishVolume(ctx context.Context, r *ControllerPublishRequest) (map[string]string, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.ControllerPublishVolumeResponse)
	if err := c.call(ctx, csipb.Controller_ControllerPublishVolume_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return resp.GetPublishContext(), nil
}

// ControllerUnpublishVolume detaches a volume from a node. NotFound means
// it is already detached (csi.TeardownDone).
func (c *Client) ControllerUnpublishVolume(ctx context.Context, r *ControllerUnpublishRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.ControllerUnpublishVolumeResponse)
	return c.call(ctx, csipb.Controller_ControllerUnpublishVolume_FullMethodName, r.Secrets, r.toPB(), resp)
}

// ValidateVolumeCapabilities asks whether a volume supports capabilities.
func (c *Client) ValidateVolumeCapabilities(ctx context.Context, r *ValidateCapabilitiesRequest) (*ValidateCapabilitiesResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.ValidateVolumeCapabilitiesResponse)
	if err := c.call(ctx, csipb.Controller_ValidateVolumeCapabilities_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return validateResponseFromPB(resp)
}

// CreateVolume provisions a volume, or returns the one already created
// under the same Name.
func (c *Client) CreateVolume(ctx context.Context, r *CreateVolumeRequest) (*Volume, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.CreateVolumeResponse)
	if err := c.call(ctx, csipb.Controller_CreateVolume_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return createVolumeResponseFromPB(resp)
}

// DeleteVolume deletes a volume. NotFound means it is already gone.
func (c *Client) DeleteVolume(ctx context.Context, r *DeleteVolumeRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.DeleteVolumeResponse)
	return c.call(ctx, csipb.Controller_DeleteVolume_FullMethodName, r.Secrets, r.toPB(), resp)
}

// ListVolumes returns one page of the plugin's volumes. A nil request
// asks for the first page.
func (c *Client) ListVolumes(ctx context.Context, r *ListVolumesRequest) (*ListVolumesResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.ListVolumesResponse)
	if err := c.call(ctx, csipb.Controller_ListVolumes_FullMethodName, nil, r.toPB(), resp); err != nil {
		return nil, err
	}
	return listVolumesResponseFromPB(resp)
}

// ControllerGetCapabilities returns the controller RPCs the plugin
// supports.
func (c *Client) ControllerGetCapabilities(ctx context.Context) (*csi.ControllerCapabilities, error) {
	resp := new(csipb.ControllerGetCapabilitiesResponse)
	if err := c.call(ctx, csipb.Controller_ControllerGetCapabilities_FullMethodName, nil, &csipb.ControllerGetCapabilitiesRequest{}, resp); err != nil {
		return nil, err
	}
	caps := controllerCapsFromPB(resp.GetCapabilities())
	return &caps, nil
}

// ControllerExpandVolume grows a volume.
func (c *Client) ControllerExpandVolume(ctx context.Context, r *ControllerExpandRequest) (*ControllerExpandResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.ControllerExpandVolumeResponse)
	if err := c.call(ctx, csipb.Controller_ControllerExpandVolume_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return &ControllerExpandResponse{Capacity: resp.GetCapacityBytes(), NodeExpansionRequired: resp.GetNodeExpansionRequired()}, nil
}

// CreateSnapshot snapshots a volume, or returns the snapshot already
// created under the same Name.
func (c *Client) CreateSnapshot(ctx context.Context, r *CreateSnapshotRequest) (*Snapshot, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.CreateSnapshotResponse)
	if err := c.call(ctx, csipb.Controller_CreateSnapshot_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return createSnapshotResponseFromPB(resp)
}

// DeleteSnapshot deletes a snapshot. NotFound means it is already gone.
func (c *Client) DeleteSnapshot(ctx context.Context, r *DeleteSnapshotRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.DeleteSnapshotResponse)
	return c.call(ctx, csipb.Controller_DeleteSnapshot_FullMethodName, r.Secrets, r.toPB(), resp)
}

// ListSnapshots returns one page of snapshots. A nil request asks for
// the first page of all snapshots.
func (c *Client) ListSnapshots(ctx context.Context, r *ListSnapshotsRequest) (*ListSnapshotsResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	var secrets csi.Secrets
	if r != nil {
		secrets = r.Secrets
	}
	resp := new(csipb.ListSnapshotsResponse)
	if err := c.call(ctx, csipb.Controller_ListSnapshots_FullMethodName, secrets, r.toPB(), resp); err != nil {
		return nil, err
	}
	return listSnapshotsResponseFromPB(resp), nil
}

// GetCapacity returns the storage the controller can still provision
// for the request's capabilities, parameters and topology
// (GET_CAPACITY). A nil request asks for the plugin's whole capacity.
func (c *Client) GetCapacity(ctx context.Context, r *GetCapacityRequest) (*GetCapacityResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.GetCapacityResponse)
	if err := c.call(ctx, csipb.Controller_GetCapacity_FullMethodName, nil, r.toPB(), resp); err != nil {
		return nil, err
	}
	return capacityResponseFromPB(resp)
}

// ControllerGetVolume returns one volume as the controller reports it
// now, with its published nodes and condition where the plugin reports
// them (GET_VOLUME). NotFound means the plugin no longer has the volume.
func (c *Client) ControllerGetVolume(ctx context.Context, r *ControllerGetVolumeRequest) (*ControllerGetVolumeResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.ControllerGetVolumeResponse)
	if err := c.call(ctx, csipb.Controller_ControllerGetVolume_FullMethodName, nil, r.toPB(), resp); err != nil {
		return nil, err
	}
	return getVolumeResponseFromPB(r.ExternalID, resp)
}
