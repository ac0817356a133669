package plugin

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// Info is what GetPluginInfo returns.
type Info struct {
	// Name is the plugin's provider name, for example
	// "hostpath.csi.k8s.io".
	Name string
	// VendorVersion is the plugin's own version.
	VendorVersion string
	// Manifest is opaque build or vendor information, possibly nil.
	Manifest map[string]string
}

// Capabilities are the plugin-wide capabilities GetPluginCapabilities
// returns. The struct is comparable with ==.
type Capabilities struct {
	// ControllerService: the plugin serves the Controller service; the
	// CO must route controller calls to it (csi.PluginInfo's
	// RequiresController).
	ControllerService bool
	// VolumeAccessibilityConstraints: volumes are not reachable from
	// every node; honour their topologies (RequiresTopologies).
	VolumeAccessibilityConstraints bool
	// GroupControllerService: the plugin serves the GroupController
	// service.
	GroupControllerService bool
	// SnapshotMetadataService: the plugin serves the SnapshotMetadata
	// service.
	SnapshotMetadataService bool
	// SnapshotAccessibilityConstraints: snapshots carry topologies.
	SnapshotAccessibilityConstraints bool
	// OnlineExpansion: volumes can grow while published.
	OnlineExpansion bool
	// OfflineExpansion: volumes can grow while not published.
	OfflineExpansion bool
}

// GetPluginInfo returns the plugin's name and version.
func (c *Client) GetPluginInfo(ctx context.Context) (*Info, error) {
	resp := new(csipb.GetPluginInfoResponse)
	if err := c.call(ctx, csipb.Identity_GetPluginInfo_FullMethodName, nil, &csipb.GetPluginInfoRequest{}, resp); err != nil {
		return nil, err
	}
	return infoFromPB(resp), nil
}

// GetPluginCapabilities returns the plugin-wide capabilities.
func (c *Client) GetPluginCapabilities(ctx context.Context) (*Capabilities, error) {
	resp := new(csipb.GetPluginCapabilitiesResponse)
	if err := c.call(ctx, csipb.Identity_GetPluginCapabilities_FullMethodName, nil, &csipb.GetPluginCapabilitiesRequest{}, resp); err != nil {
		return nil, err
	}
	caps := pluginCapsFromPB(resp.GetCapabilities())
	return &caps, nil
}

// Probe asks whether the plugin is ready. A plugin that leaves the
// optional ready field out is ready, as the spec says.
func (c *Client) Probe(ctx context.Context) (bool, error) {
	resp := new(csipb.ProbeResponse)
	if err := c.call(ctx, csipb.Identity_Probe_FullMethodName, nil, &csipb.ProbeRequest{}, resp); err != nil {
		return false, err
	}
	return readyFromPB(resp), nil
}
