package rpcshim

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// The controller calls a NodeEndpoint serves: each finds the node's
// local controller of the plugin its request names (controller), makes
// one plugin call, and wraps the plugin's error with the plugin and node
// (pluginErr). The calls below hold only the plugin call itself.

// handleControllerCalls registers every controller method on e's Mux.
func (e *NodeEndpoint) handleControllerCalls() {
	handleController(e, MethodControllerPublish, "ControllerPublishVolume", publishVolume)
	handleController(e, MethodControllerUnpublish, "ControllerUnpublishVolume", unpublishVolume)
	handleController(e, MethodControllerValidateCapabilities, "ValidateVolumeCapabilities", validateCapabilities)
	handleController(e, MethodControllerCreateVolume, "CreateVolume", createVolume)
	handleController(e, MethodControllerDeleteVolume, "DeleteVolume", deleteVolume)
	handleController(e, MethodControllerListVolumes, "ListVolumes", listVolumes)
	handleController(e, MethodControllerGetCapacity, "GetCapacity", getCapacity)
	handleController(e, MethodControllerExpandVolume, "ControllerExpandVolume", expandVolume)
	handleController(e, MethodControllerCreateSnapshot, "CreateSnapshot", createSnapshot)
	handleController(e, MethodControllerDeleteSnapshot, "DeleteSnapshot", deleteSnapshot)
	handleController(e, MethodControllerListSnapshots, "ListSnapshots", listSnapshots)
	e.handleHealthCalls()
}

// controllerCall is the plugin call of one controller method.
type controllerCall[Req, Resp any] func(ctx context.Context, c plugin.ControllerClient, req *Req) (*Resp, error)

// handleController registers call under method on e's Mux; op is the
// CSI call's name, for errors and logs. The method is inline: it blocks
// only in the plugin client, whose calls end with ctx.
func handleController[Req, Resp any, PReq interface {
	*Req
	controllerRequest
}](e *NodeEndpoint, method, op string, call controllerCall[Req, Resp]) {
	handle(e.mux, method, func(ctx context.Context, req *Req) (*Resp, error) {
		q := PReq(req).query()
		c, err := e.controller(q, op)
		if err != nil {
			return nil, err
		}
		resp, err := call(ctx, c, req)
		if err != nil {
			return nil, e.pluginErr(q, op, err)
		}
		return resp, nil
	}, true)
}

// controller returns the local controller plugin a request names.
func (e *NodeEndpoint) controller(q *CSIControllerQuery, op string) (plugin.ControllerClient, error) {
	if err := csi.ValidatePluginID(q.PluginID); err != nil {
		return nil, fmt.Errorf("%s on node %s: %w", op, e.nodeID, err)
	}
	if q.ControllerNodeID != "" && q.ControllerNodeID != e.nodeID {
		return nil, e.misrouted(op, q.ControllerNodeID)
	}
	c, info, err := e.plugins.ControllerPlugin(q.PluginID)
	if err != nil {
		e.logger.Debug("controller call for a plugin not running here", "method", op, "plugin_id", q.PluginID, "error", err)
		return nil, fmt.Errorf("%s on node %s: %w", op, e.nodeID, err)
	}
	if info != nil && !info.Healthy {
		return nil, fmt.Errorf("%w: %s on node %s: the controller of plugin %s is unhealthy here (%s); the router should use another node",
			csi.ErrPluginUnhealthy, op, e.nodeID, q.PluginID, info.HealthDescription)
	}
	return c, nil
}

// pluginErr wraps a plugin's error with the plugin and the node.
func (e *NodeEndpoint) pluginErr(q *CSIControllerQuery, op string, err error) error {
	e.logger.Debug("controller plugin call failed", "method", op, "plugin_id", q.PluginID, "class", csi.Classify(err), "error", err)
	return fmt.Errorf("plugin %s on node %s: %w", q.PluginID, e.nodeID, err)
}

func publishVolume(ctx context.Context, c plugin.ControllerClient, req *ControllerPublishRequest) (*ControllerPublishResponse, error) {
	pc, err := c.ControllerPublishVolume(ctx, &req.ControllerPublishRequest)
	if err != nil {
		return nil, err
	}
	return &ControllerPublishResponse{PublishContext: pc}, nil
}

func unpublishVolume(ctx context.Context, c plugin.ControllerClient, req *ControllerUnpublishRequest) (*ControllerUnpublishResponse, error) {
	if err := c.ControllerUnpublishVolume(ctx, &req.ControllerUnpublishRequest); err != nil {
		return nil, err
	}
	return &ControllerUnpublishResponse{}, nil
}

func validateCapabilities(ctx context.Context, c plugin.ControllerClient, req *ValidateCapabilitiesRequest) (*ValidateCapabilitiesResponse, error) {
	r, err := c.ValidateVolumeCapabilities(ctx, &req.ValidateCapabilitiesRequest)
	if err != nil {
		return nil, err
	}
	return &ValidateCapabilitiesResponse{ValidateCapabilitiesResponse: *r}, nil
}

func createVolume(ctx context.Context, c plugin.ControllerClient, req *CreateVolumeRequest) (*CreateVolumeResponse, error) {
	v, err := c.CreateVolume(ctx, &req.CreateVolumeRequest)
	if err != nil {
		return nil, err
	}
	return &CreateVolumeResponse{Volume: *v}, nil
}

func deleteVolume(ctx context.Context, c plugin.ControllerClient, req *DeleteVolumeRequest) (*DeleteVolumeResponse, error) {
	if err := c.DeleteVolume(ctx, &req.DeleteVolumeRequest); err != nil {
		return nil, err
	}
	return &DeleteVolumeResponse{}, nil
}

func getCapacity(ctx context.Context, c plugin.ControllerClient, req *GetCapacityRequest) (*GetCapacityResponse, error) {
	r, err := c.GetCapacity(ctx, &req.GetCapacityRequest)
	if err != nil {
		return nil, err
	}
	return &GetCapacityResponse{GetCapacityResponse: *r}, nil
}

func listVolumes(ctx context.Context, c plugin.ControllerClient, req *ListVolumesRequest) (*ListVolumesResponse, error) {
	r, err := c.ListVolumes(ctx, &req.ListVolumesRequest)
	if err != nil {
		return nil, err
	}
	return &ListVolumesResponse{ListVolumesResponse: *r}, nil
}

func expandVolume(ctx context.Context, c plugin.ControllerClient, req *ExpandVolumeRequest) (*ExpandVolumeResponse, error) {
	r, err := c.ControllerExpandVolume(ctx, &req.ControllerExpandRequest)
	if err != nil {
		return nil, err
	}
	return &ExpandVolumeResponse{ControllerExpandResponse: *r}, nil
}

func createSnapshot(ctx context.Context, c plugin.ControllerClient, req *CreateSnapshotRequest) (*CreateSnapshotResponse, error) {
	s, err := c.CreateSnapshot(ctx, &req.CreateSnapshotRequest)
	if err != nil {
		return nil, err
	}
	return &CreateSnapshotResponse{Snapshot: *s}, nil
}

func deleteSnapshot(ctx context.Context, c plugin.ControllerClient, req *DeleteSnapshotRequest) (*DeleteSnapshotResponse, error) {
	if err := c.DeleteSnapshot(ctx, &req.DeleteSnapshotRequest); err != nil {
		return nil, err
	}
	return &DeleteSnapshotResponse{}, nil
}

func listSnapshots(ctx context.Context, c plugin.ControllerClient, req *ListSnapshotsRequest) (*ListSnapshotsResponse, error) {
	r, err := c.ListSnapshots(ctx, &req.ListSnapshotsRequest)
	if err != nil {
		return nil, err
	}
	return &ListSnapshotsResponse{ListSnapshotsResponse: *r}, nil
}
