package capacity

import (
	"context"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// The interfaces below are what the Refresher needs from the rest of the
// server; capacity declares them so that it never imports a higher
// layer. The Refresher calls them from its own goroutines, up to
// Config.Parallelism at a time.

// Store reads the plugins and their capacity records. A state.Reader
// (state.MemStore) satisfies it. The Refresher owns what it returns
// (state's copies) and does not change it. An error other than
// csi.ErrPluginNotFound ends the pass for that plugin; the next pass
// tries again.
type Store interface {
	// Plugins lists every plugin with its controller and node instances.
	Plugins() ([]*csi.Plugin, error)
	// Plugin reads one plugin; a missing one matches csi.ErrPluginNotFound.
	Plugin(id string) (*csi.Plugin, error)
	// Capacity reads a plugin's stored capacity records.
	Capacity(pluginID string) ([]state.Capacity, error)
}

var _ Store = state.Reader(nil)

// Controllers calls GetCapacity on a healthy controller of a plugin: the
// host implements it over its router (rpcshim's router, or a
// plugin.Client per plugin in a single-node host; ControllerFunc adapts a
// function). The request is the Refresher's and must not be kept; the
// response becomes the caller's. Any error keeps the plugin's last
// value for that topology and class: the Refresher logs the first
// failure of a run of failures and asks again on the next pass. The
// error text is logged, so it must hold no secret (GetCapacity carries
// none).
type Controllers interface {
	GetCapacity(ctx context.Context, pluginID string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error)
}

// ControllerFunc adapts a function to Controllers.
type ControllerFunc func(ctx context.Context, pluginID string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error)

// GetCapacity implements Controllers.
func (f ControllerFunc) GetCapacity(ctx context.Context, pluginID string, req *plugin.GetCapacityRequest) (*plugin.GetCapacityResponse, error) {
	return f(ctx, pluginID, req)
}

var _ Controllers = ControllerFunc(nil)

// Observer receives one event per plugin refreshed, for metrics and
// tests. It is called from the Refresher's Run goroutine, after the
// plugin's write (if any), so it must return quickly. calls is the
// number of GetCapacity calls made, failed how many of them failed,
// changed whether a SetCapacity was written, and err the pass's own
// failure (a store read or the write), nil when it went through.
type Observer interface {
	Refreshed(pluginID string, calls, failed int, changed bool, err error)
}
