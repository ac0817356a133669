package plugin

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// NodeStageRequest asks the node plugin to stage a volume (make it
// available on the node, for example format and mount a device) once
// for all its publications.
type NodeStageRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
	// PublishContext is what ControllerPublishVolume returned, if called.
	PublishContext map[string]string
	// StagingPath is an absolute directory for the staged volume.
	// Required.
	StagingPath string
	Capability  csi.Capability
	// MountOptions go with a file-system Capability; nil for block.
	MountOptions  *csi.MountOptions
	Secrets       csi.Secrets
	VolumeContext map[string]string
}

// NodeUnstageRequest undoes a NodeStageVolume.
type NodeUnstageRequest struct {
	ExternalID  string
	StagingPath string
}

// NodePublishRequest asks the node plugin to make a volume available at
// TargetPath for one workload.
type NodePublishRequest struct {
	// ExternalID is the plugin's volume ID. Required.
	ExternalID string
	// StagingPath is where the volume was staged; empty when the plugin
	// does not stage.
	StagingPath string
	// TargetPath is the absolute path to publish at. Required.
	TargetPath string
	Capability csi.Capability
	// MountOptions go with a file-system Capability; nil for block.
	MountOptions   *csi.MountOptions
	ReadOnly       bool
	Secrets        csi.Secrets
	PublishContext map[string]string
	VolumeContext  map[string]string
}

// NodeUnpublishRequest undoes a NodePublishVolume.
type NodeUnpublishRequest struct {
	ExternalID string
	TargetPath string
}

// NodeExpandRequest asks the node plugin to grow a volume's file system
// after ControllerExpandVolume.
type NodeExpandRequest struct {
	ExternalID string
	// VolumePath is where the volume is published. Required.
	VolumePath string
	// StagingPath, if the volume is staged.
	StagingPath string
	CapacityMin int64
	CapacityMax int64
	// Capability, if set, is how the volume is used.
	Capability   *csi.Capability
	MountOptions *csi.MountOptions
	Secrets      csi.Secrets
}

// NodeVolumeStatsRequest asks for the usage of a published volume.
type NodeVolumeStatsRequest struct {
	ExternalID string
	// VolumePath is where the volume is published. Required.
	VolumePath  string
	StagingPath string
}

// VolumeStats is a volume's usage; a field is nil when the plugin did
// not report it.
type VolumeStats struct {
	Bytes  *Usage
	Inodes *Usage
	// Condition is the volume's health as the node sees it, nil when
	// the plugin reported none. Like VolumeStatus.Condition it is the
	// field CSI 1.13 removed (number 2 of the response), which plugins
	// built on spec 1.3 to 1.12 with VOLUME_CONDITION still send.
	Condition *VolumeCondition
}

// Usage is the use of one resource (bytes or inodes) of a volume.
type Usage struct {
	Available int64
	Total     int64
	Used      int64
}

// NodeGetInfo returns the node plugin's node ID, volume limit and
// topology. Capabilities are left zero: NodeGetCapabilities fills them.
func (c *Client) NodeGetInfo(ctx context.Context) (*csi.NodeInfo, error) {
	resp := new(csipb.NodeGetInfoResponse)
	if err := c.call(ctx, csipb.Node_NodeGetInfo_FullMethodName, nil, &csipb.NodeGetInfoRequest{}, resp); err != nil {
		return nil, err
	}
	return nodeInfoFromPB(resp), nil
}

// NodeGetCapabilities returns the node RPCs the plugin supports.
func (c *Client) NodeGetCapabilities(ctx context.Context) (*csi.NodeCapabilities, error) {
	resp := new(csipb.NodeGetCapabilitiesResponse)
	if err := c.call(ctx, csipb.Node_NodeGetCapabilities_FullMethodName, nil, &csipb.NodeGetCapabilitiesRequest{}, resp); err != nil {
		return nil, err
	}
	caps := nodeCapsFromPB(resp.GetCapabilities())
	return &caps, nil
}

// NodeStageVolume stages a volume at r.StagingPath.
func (c *Client) NodeStageVolume(ctx context.Context, r *NodeStageRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.NodeStageVolumeResponse)
	return c.call(ctx, csipb.Node_NodeStageVolume_FullMethodName, r.Secrets, r.toPB(), resp)
}

// NodeUnstageVolume unstages a volume. NotFound means it is not staged.
func (c *Client) NodeUnstageVolume(ctx context.Context, r *NodeUnstageRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.NodeUnstageVolumeResponse)
	return c.call(ctx, csipb.Node_NodeUnstageVolume_FullMethodName, nil, r.toPB(), resp)
}

// NodePublishVolume publishes a volume at r.TargetPath.
func (c *Client) NodePublishVolume(ctx context.Context, r *NodePublishRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.NodePublishVolumeResponse)
	return c.call(ctx, csipb.Node_NodePublishVolume_FullMethodName, r.Secrets, r.toPB(), resp)
}

// NodeUnpublishVolume unpublishes a volume. NotFound means it is not
// published.
func (c *Client) NodeUnpublishVolume(ctx context.Context, r *NodeUnpublishRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	resp := new(csipb.NodeUnpublishVolumeResponse)
	return c.call(ctx, csipb.Node_NodeUnpublishVolume_FullMethodName, nil, r.toPB(), resp)
}

// NodeExpandVolume grows a volume on the node and returns its new
// capacity in bytes (0 if the plugin did not say).
func (c *Client) NodeExpandVolume(ctx context.Context, r *NodeExpandRequest) (int64, error) {
	if err := r.validate(); err != nil {
		return 0, err
	}
	resp := new(csipb.NodeExpandVolumeResponse)
	if err := c.call(ctx, csipb.Node_NodeExpandVolume_FullMethodName, r.Secrets, r.toPB(), resp); err != nil {
		return 0, err
	}
	return resp.GetCapacityBytes(), nil
}

// NodeGetVolumeStats returns a published volume's usage and, from a
// plugin that sends one, its condition.
func (c *Client) NodeGetVolumeStats(ctx context.Context, r *NodeVolumeStatsRequest) (*VolumeStats, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	resp := new(csipb.NodeGetVolumeStatsResponse)
	if err := c.call(ctx, csipb.Node_NodeGetVolumeStats_FullMethodName, nil, r.toPB(), resp); err != nil {
		return nil, err
	}
	return volumeStatsFromPB(resp)
}
