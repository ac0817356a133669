package plugin

import (
	"context"

	"github.com/csikit/csikit/csi"
)

// The three interfaces below split Client along the CSI services, so a
// higher layer depends on the one it calls: fingerprinting on
// IdentityClient and NodeClient, the mounter on NodeClient, controller
// routing on ControllerClient. Tests of those layers may implement them
// with fakes.
//
// For every method: ctx bounds the call (with Config.CallTimeout); the
// request is validated first and a malformed one returns a *RequestError
// (csi.ErrInvalidRequest) without any RPC; a failed RPC returns a
// *csi.RPCError whose class (csi.Classify) says whether to retry, after
// the Client's own retries of Retryable codes; a response the Client
// cannot use returns a *ResponseError. Returned values belong to the
// caller. Methods may be called from any goroutine.

// IdentityClient calls a plugin's Identity service.
type IdentityClient interface {
	GetPluginInfo(ctx context.Context) (*Info, error)
	GetPluginCapabilities(ctx context.Context) (*Capabilities, error)
	Probe(ctx context.Context) (ready bool, err error)
}

// ControllerClient calls a plugin's Controller service.
type ControllerClient interface {
	ControllerGetCapabilities(ctx context.Context) (*csi.ControllerCapabilities, error)
	ControllerPublishVolume(ctx context.Context, r *ControllerPublishRequest) (publishContext map[string]string, err error)
	ControllerUnpublishVolume(ctx context.Context, r *ControllerUnpublishRequest) error
	ValidateVolumeCapabilities(ctx context.Context, r *ValidateCapabilitiesRequest) (*ValidateCapabilitiesResponse, error)
	CreateVolume(ctx context.Context, r *CreateVolumeRequest) (*Volume, error)
	DeleteVolume(ctx context.Context, r *DeleteVolumeRequest) error
	ListVolumes(ctx context.Context, r *ListVolumesRequest) (*ListVolumesResponse, error)
	ControllerExpandVolume(ctx context.Context, r *ControllerExpandRequest) (*ControllerExpandResponse, error)
	CreateSnapshot(ctx context.Context, r *CreateSnapshotRequest) (*Snapshot, error)
	DeleteSnapshot(ctx context.Context, r *DeleteSnapshotRequest) error
	ListSnapshots(ctx context.Context, r *ListSnapshotsRequest) (*ListSnapshotsResponse, error)
	GetCapacity(ctx context.Context, r *GetCapacityRequest) (*GetCapacityResponse, error)
	ControllerGetVolume(ctx context.Context, r *ControllerGetVolumeRequest) (*ControllerGetVolumeResponse, error)
}

// NodeClient calls a plugin's Node service.
type NodeClient interface {
	NodeGetInfo(ctx context.Context) (*csi.NodeInfo, error)
	NodeGetCapabilities(ctx context.Context) (*csi.NodeCapabilities, error)
	NodeStageVolume(ctx context.Context, r *NodeStageRequest) error
	NodeUnstageVolume(ctx context.Context, r *NodeUnstageRequest) error
	NodePublishVolume(ctx context.Context, r *NodePublishRequest) error
	NodeUnpublishVolume(ctx context.Context, r *NodeUnpublishRequest) error
	NodeExpandVolume(ctx context.Context, r *NodeExpandRequest) (capacity int64, err error)
	NodeGetVolumeStats(ctx context.Context, r *NodeVolumeStatsRequest) (*VolumeStats, error)
}
