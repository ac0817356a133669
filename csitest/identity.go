package csitest

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type identityServer struct {
	csipb.UnimplementedIdentityServer
	p *Plugin
}

var _ csipb.IdentityServer = identityServer{}

func (s identityServer) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: s.p.name, VendorVersion: s.p.version}, nil
}

func (s identityServer) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	p := s.p
	p.mu.Lock()
	ctrl, node := p.ctrlCaps, p.nodeCaps
	p.mu.Unlock()
	service := func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: t}}}
	}
	var caps []*csipb.PluginCapability
	if p.typ.HasController() {
		caps = append(caps, service(csipb.PluginCapability_Service_CONTROLLER_SERVICE))
	}
	if p.requiresTopologies {
		caps = append(caps, service(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	if ctrl.ExpandVolume || node.ExpandVolume {
		caps = append(caps, &csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: p.expansionType()},
		}})
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (s identityServer) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	s.p.mu.Lock()
	ready := s.p.probeReady
	s.p.mu.Unlock()
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(ready)}, nil
}
