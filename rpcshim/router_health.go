// router_health.go holds what the health monitor (package health) needs
// from the router: ControllerGetVolume routed to a healthy controller,
// and the Router as health.Controllers.

package rpcshim

import (
	"context"

	"github.com/csikit/csikit/csi/plugin"
)

// MethodControllerGetVolume: ControllerGetVolumeRequest →
// ControllerGetVolumeResponse (ControllerGetVolume).
const MethodControllerGetVolume = "ClientCSI.ControllerGetVolume"

// ControllerGetVolumeRequest asks a controller for one volume's status.
type ControllerGetVolumeRequest struct {
	CSIControllerQuery
	plugin.ControllerGetVolumeRequest
}

// ControllerGetVolumeResponse is the volume as the controller reports
// it, with its published nodes and condition where it reports them.
type ControllerGetVolumeResponse struct {
	CSIControllerReply
	plugin.ControllerGetVolumeResponse
}

// ControllerGetVolume asks a controller of the plugin for one volume
// (GET_VOLUME). NotFound means the plugin no longer has it.
func (r *Router) ControllerGetVolume(ctx context.Context, req *ControllerGetVolumeRequest) (*ControllerGetVolumeResponse, error) {
	return callController[ControllerGetVolumeRequest, ControllerGetVolumeResponse](ctx, r, MethodControllerGetVolume, req)
}

func getVolume(ctx context.Context, c plugin.ControllerClient, req *ControllerGetVolumeRequest) (*ControllerGetVolumeResponse, error) {
	resp, err := c.ControllerGetVolume(ctx, &req.ControllerGetVolumeRequest)
	if err != nil {
		return nil, err
	}
	return &ControllerGetVolumeResponse{ControllerGetVolumeResponse: *resp}, nil
}

// handleHealthCalls registers the controller methods the health monitor
// adds on e's Mux.
func (e *NodeEndpoint) handleHealthCalls() {
	handleController(e, MethodControllerGetVolume, "ControllerGetVolume", getVolume)
	handle(e.mux, MethodNodeVolumeStats, e.nodeVolumeStats, true)
}

// HealthControllers returns the Router as the health monitor's
// Controllers (package health, which sits above rpcshim and declares
// the interface ControllerCalls meets): ListVolumes,
// ControllerGetVolume and ControllerUnpublish routed to a healthy
// controller of each plugin, the unpublish serialized with the claims'
// attaches to the same node.
func (r *Router) HealthControllers() ControllerCalls { return ControllerCalls{r} }

// ControllerCalls calls a plugin's controller through a Router by
// plugin ID, with the csi/plugin requests; see Router.HealthControllers.
type ControllerCalls struct{ r *Router }

// ListVolumes routes req to a healthy controller of pluginID.
func (h ControllerCalls) ListVolumes(ctx context.Context, pluginID string, req *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error) {
	resp, err := h.r.ListVolumes(ctx, &ListVolumesRequest{CSIControllerQuery: CSIControllerQuery{PluginID: pluginID}, ListVolumesRequest: *req})
	if err != nil {
		return nil, err
	}
	return &resp.ListVolumesResponse, nil
}

// ControllerGetVolume routes req to a healthy controller of pluginID.
func (h ControllerCalls) ControllerGetVolume(ctx context.Context, pluginID string, req *plugin.ControllerGetVolumeRequest) (*plugin.ControllerGetVolumeResponse, error) {
	resp, err := h.r.ControllerGetVolume(ctx, &ControllerGetVolumeRequest{CSIControllerQuery: CSIControllerQuery{PluginID: pluginID}, ControllerGetVolumeRequest: *req})
	if err != nil {
		return nil, err
	}
	return &resp.ControllerGetVolumeResponse, nil
}

// ControllerUnpublish routes req to a healthy controller of pluginID,
// serialized with the claims' attaches to the same node.
func (h ControllerCalls) ControllerUnpublish(ctx context.Context, pluginID string, req *plugin.ControllerUnpublishRequest) error {
	_, err := h.r.ControllerUnpublish(ctx, &ControllerUnpublishRequest{CSIControllerQuery: CSIControllerQuery{PluginID: pluginID}, ControllerUnpublishRequest: *req})
	return err
}
