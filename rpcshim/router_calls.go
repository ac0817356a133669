// router_calls.go holds the Router's controller calls: one short method
// per CSI controller RPC, each routed by callController (router.go) to
// a healthy controller of the request's plugin.

package rpcshim

import (
	"context"

	"github.com/csikit/csikit/csi/plugin"
)

// ControllerPublish attaches a volume to the node whose CSI node ID is
// req.ExternalNodeID, through a controller of req.PluginID. It is
// serialized with other attaches and detaches of the plugin to that node.
func (r *Router) ControllerPublish(ctx context.Context, req *ControllerPublishRequest) (*ControllerPublishResponse, error) {
	return callController[ControllerPublishRequest, ControllerPublishResponse](ctx, r, MethodControllerPublish, req)
}

// ControllerUnpublish detaches a volume from the node whose CSI node ID
// is req.ExternalNodeID. It is serialized like ControllerPublish. A
// plugin answering NotFound (csi.TeardownDone) means it was not attached.
func (r *Router) ControllerUnpublish(ctx context.Context, req *ControllerUnpublishRequest) (*ControllerUnpublishResponse, error) {
	return callController[ControllerUnpublishRequest, ControllerUnpublishResponse](ctx, r, MethodControllerUnpublish, req)
}

// ValidateVolumeCapabilities asks a controller whether a volume supports
// capabilities.
func (r *Router) ValidateVolumeCapabilities(ctx context.Context, req *ValidateCapabilitiesRequest) (*ValidateCapabilitiesResponse, error) {
	return callController[ValidateCapabilitiesRequest, ValidateCapabilitiesResponse](ctx, r, MethodControllerValidateCapabilities, req)
}

// CreateVolume provisions a volume through a controller.
func (r *Router) CreateVolume(ctx context.Context, req *CreateVolumeRequest) (*CreateVolumeResponse, error) {
	return callController[CreateVolumeRequest, CreateVolumeResponse](ctx, r, MethodControllerCreateVolume, req)
}

// DeleteVolume deletes a volume through a controller. NotFound
// (csi.TeardownDone) means it is already gone.
func (r *Router) DeleteVolume(ctx context.Context, req *DeleteVolumeRequest) (*DeleteVolumeResponse, error) {
	return callController[DeleteVolumeRequest, DeleteVolumeResponse](ctx, r, MethodControllerDeleteVolume, req)
}

// ListVolumes returns one page of the plugin's volumes.
func (r *Router) ListVolumes(ctx context.Context, req *ListVolumesRequest) (*ListVolumesResponse, error) {
	return callController[ListVolumesRequest, ListVolumesResponse](ctx, r, MethodControllerListVolumes, req)
}

// GetCapacity asks a controller of the plugin how much it can still
// provision. capacity.ControllerFunc adapts it for the capacity
// refresher (see Router.CapacityOf).
func (r *Router) GetCapacity(ctx context.Context, req *GetCapacityRequest) (*GetCapacityResponse, error) {
	return callController[GetCapacityRequest, GetCapacityResponse](ctx, r, MethodControllerGetCapacity, req)
}

// CapacityOf is GetCapacity with the capacity refresher's signature
// (capacity.Controllers): wrap it as capacity.ControllerFunc(r.CapacityOf).
func (r *Router) CapacityOf(ctx context.Context, pluginID string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
	q := &GetCapacityRequest{CSIControllerQuery: CSIControllerQuery{PluginID: pluginID}}
	if req != nil {
		q.GetCapacityRequest = *req
	}
	resp, err := r.GetCapacity(ctx, q)
	if err != nil {
		return nil, err
	}
	return &resp.GetCapacityResponse, nil
}

// ExpandVolume grows a volume through a controller.
func (r *Router) ExpandVolume(ctx context.Context, req *ExpandVolumeRequest) (*ExpandVolumeResponse, error) {
	return callController[ExpandVolumeRequest, ExpandVolumeResponse](ctx, r, MethodControllerExpandVolume, req)
}

// CreateSnapshot snapshots a volume through a controller.
func (r *Router) CreateSnapshot(ctx context.Context, req *CreateSnapshotRequest) (*CreateSnapshotResponse, error) {
	return callController[CreateSnapshotRequest, CreateSnapshotResponse](ctx, r, MethodControllerCreateSnapshot, req)
}

// DeleteSnapshot deletes a snapshot through a controller. NotFound
// (csi.TeardownDone) means it is already gone.
func (r *Router) DeleteSnapshot(ctx context.Context, req *DeleteSnapshotRequest) (*DeleteSnapshotResponse, error) {
	return callController[DeleteSnapshotRequest, DeleteSnapshotResponse](ctx, r, MethodControllerDeleteSnapshot, req)
}

// ListSnapshots returns one page of snapshots.
func (r *Router) ListSnapshots(ctx context.Context, req *ListSnapshotsRequest) (*ListSnapshotsResponse, error) {
	return callController[ListSnapshotsRequest, ListSnapshotsResponse](ctx, r, MethodControllerListSnapshots, req)
}
