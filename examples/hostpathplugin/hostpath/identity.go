package hostpath

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity serves the CSI Identity service in every mode.
type identity struct {
	csipb.UnimplementedIdentityServer
	p *Plugin
}

var _ csipb.IdentityServer = (*identity)(nil)

func (s *identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{
		Name:          s.p.cfg.Name,
		VendorVersion: s.p.cfg.Version,
		Manifest: map[string]string{
			"mode":  string(s.p.cfg.Mode),
			"mount": string(s.p.mount),
		},
	}, nil
}

func (s *identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	resp := &csipb.GetPluginCapabilitiesResponse{}
	// The capabilities describe the plugin, so a split plugin's node half
	// advertises its controller's (see Config.SplitNode).
	if s.p.cfg.Mode.hasController() || s.p.cfg.SplitNode {
		resp.Capabilities = append(resp.Capabilities,
			&csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
				Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE,
			}}},
			// A volume's capacity is a recorded number, so expanding it
			// never needs the volume offline.
			&csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
				Type: csipb.PluginCapability_VolumeExpansion_ONLINE,
			}}},
		)
	}
	// Volumes are reachable only from the plugin's topology; the
	// capability describes the plugin, so every mode advertises it.
	if len(s.p.cfg.Topology) > 0 {
		resp.Capabilities = append(resp.Capabilities,
			&csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
				Type: csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
			}}})
	}
	return resp, nil
}

// Probe reports ready: once Serve answers calls, the data dir is open and
// the state loaded.
func (s *identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
