package health

import (
	"context"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// The interfaces below are what the Monitor needs from the rest of the
// server; health declares them so that it never imports a higher layer.
// The Monitor calls them from its Run goroutine and from the call
// workers it starts, up to Config.Parallelism at a time.

// Store reads the plugins, volumes and health records. A state.Reader
// (state.MemStore) satisfies it. The Monitor owns what it returns (the
// store's copies) and does not change it. An error ends the pass for
// the plugin (or the whole pass); the next pass tries again.
type Store interface {
	// Plugins lists every plugin with its controller and node instances.
	Plugins() ([]*csi.Plugin, error)
	// VolumesByPlugin lists the volumes of one plugin.
	VolumesByPlugin(pluginID string) ([]*csi.Volume, error)
	// Healths lists the stored health records.
	Healths() ([]*state.VolumeHealth, error)
}

var _ Store = state.Reader(nil)

// Controllers calls a plugin's controller: the host implements it over
// its router (rpcshim's Router with HealthControllers, or a
// plugin.Client per plugin in a single-node host; ControllerFuncs
// adapts functions). Requests are the Monitor's and must not be kept;
// responses become the caller's. A NotFound from ControllerGetVolume
// (csi.ErrVolumeNotFound, or a *csi.RPCError with code NotFound) marks
// the volume missing; NotFound from ControllerUnpublish means already
// detached. Other errors are logged (they must hold no secret) and the
// call is asked again on the next pass.
type Controllers interface {
	ListVolumes(ctx context.Context, pluginID string, req *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error)
	ControllerGetVolume(ctx context.Context, pluginID string, req *plugin.ControllerGetVolumeRequest) (*plugin.ControllerGetVolumeResponse, error)
	ControllerUnpublish(ctx context.Context, pluginID string, req *plugin.ControllerUnpublishRequest) error
}

// ControllerFuncs adapts three functions to Controllers; a nil one
// answers csi.ErrUnavailable.
type ControllerFuncs struct {
	List      func(ctx context.Context, pluginID string, req *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error)
	Get       func(ctx context.Context, pluginID string, req *plugin.ControllerGetVolumeRequest) (*plugin.ControllerGetVolumeResponse, error)
	Unpublish func(ctx context.Context, pluginID string, req *plugin.ControllerUnpublishRequest) error
}

// ListVolumes implements Controllers.
func (f ControllerFuncs) ListVolumes(ctx context.Context, pluginID string, req *plugin.ListVolumesRequest) (*plugin.ListVolumesResponse, error) {
	if f.List == nil {
		return nil, unavailable("ListVolumes")
	}
	return f.List(ctx, pluginID, req)
}

// ControllerGetVolume implements Controllers.
func (f ControllerFuncs) ControllerGetVolume(ctx context.Context, pluginID string, req *plugin.ControllerGetVolumeRequest) (*plugin.ControllerGetVolumeResponse, error) {
	if f.Get == nil {
		return nil, unavailable("ControllerGetVolume")
	}
	return f.Get(ctx, pluginID, req)
}

// ControllerUnpublish implements Controllers.
func (f ControllerFuncs) ControllerUnpublish(ctx context.Context, pluginID string, req *plugin.ControllerUnpublishRequest) error {
	if f.Unpublish == nil {
		return unavailable("ControllerUnpublishVolume")
	}
	return f.Unpublish(ctx, pluginID, req)
}

var _ Controllers = ControllerFuncs{}

// Nodes calls NodeGetVolumeStats on a node's plugin: the host
// implements it over its transport to the node (rpcshim's Router with
// HealthNodes); the node side, which knows where v is staged or
// published, picks the path. v is the Monitor's and must not be kept. csi.ErrVolumeNotFound or a
// NotFound code means the volume is no longer staged or published
// there, and clears the node's report; any other error keeps the last
// one, and the call is asked again on the next pass.
type Nodes interface {
	VolumeStats(ctx context.Context, nodeID string, v *csi.Volume) (*plugin.VolumeStats, error)
}

// NodeFunc adapts a function to Nodes.
type NodeFunc func(ctx context.Context, nodeID string, v *csi.Volume) (*plugin.VolumeStats, error)

// VolumeStats implements Nodes.
func (f NodeFunc) VolumeStats(ctx context.Context, nodeID string, v *csi.Volume) (*plugin.VolumeStats, error) {
	return f(ctx, nodeID, v)
}

var _ Nodes = NodeFunc(nil)

// Observer receives the Monitor's events, for the host to watch and for
// metrics. It is called from the Run goroutine (or Pass's caller) after
// the write an event stands for, so it must return quickly.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(e Event) { f(e) }
