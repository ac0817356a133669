package csitest_test

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func pluginCaps(t *testing.T, c clients) (controller, topologies, expansion bool) {
	t.Helper()
	resp, err := c.id.GetPluginCapabilities(ctxT(t), &csipb.GetPluginCapabilitiesRequest{})
	noErr(t, err)
	for _, pc := range resp.GetCapabilities() {
		switch pc.GetService().GetType() {
		case csipb.PluginCapability_Service_CONTROLLER_SERVICE:
			controller = true
		case csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			topologies = true
		}
		if pc.GetVolumeExpansion().GetType() == csipb.PluginCapability_VolumeExpansion_ONLINE {
			expansion = true
		}
	}
	return controller, topologies, expansion
}

func TestIdentity_GetPluginCapabilities(t *testing.T) {
	tests := []struct {
		name                  string
		cfg                   csitest.Config
		ctrl, topo, expansion bool
	}{
		{"monolith", csitest.Config{}, true, false, false},
		{"controller", csitest.Config{Type: csi.PluginTypeController}, true, false, false},
		{"node", csitest.Config{Type: csi.PluginTypeNode}, false, false, false},
		{"topologies", csitest.Config{RequiresTopologies: true}, true, true, false},
		{"expansion", csitest.Config{Node: csi.NodeCapabilities{ExpandVolume: true}}, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := start(t, tt.cfg)
			ctrl, topo, exp := pluginCaps(t, c)
			if ctrl != tt.ctrl || topo != tt.topo || exp != tt.expansion {
				t.Errorf("controller=%v topologies=%v expansion=%v, want %v %v %v", ctrl, topo, exp, tt.ctrl, tt.topo, tt.expansion)
			}
		})
	}
}

func TestIdentity_GetPluginInfo_Configured(t *testing.T) {
	_, c := start(t, csitest.Config{Name: "hostpath.example.com", Version: "2.3.4"})
	info, err := c.id.GetPluginInfo(ctxT(t), &csipb.GetPluginInfoRequest{})
	noErr(t, err)
	if info.GetName() != "hostpath.example.com" || info.GetVendorVersion() != "2.3.4" {
		t.Errorf("GetPluginInfo = %v", info)
	}
}

func TestIdentity_Probe_Ready(t *testing.T) {
	p, c := start(t, csitest.Config{})
	ctx := ctxT(t)
	for _, ready := range []bool{true, false, true} {
		p.SetProbeReady(ready)
		resp, err := c.id.Probe(ctx, &csipb.ProbeRequest{})
		noErr(t, err)
		if resp.GetReady().GetValue() != ready {
			t.Errorf("Probe ready = %v, want %v", resp.GetReady().GetValue(), ready)
		}
	}
}

func TestPlugin_ServiceByType(t *testing.T) {
	tests := []struct {
		name           string
		typ            csi.PluginType
		ctrlOK, nodeOK bool
	}{
		{"monolith", csi.PluginTypeMonolith, true, true},
		{"controller", csi.PluginTypeController, true, false},
		{"node", csi.PluginTypeNode, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := start(t, csitest.Config{Type: tt.typ})
			ctx := ctxT(t)
			_, err := c.ctrl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
			wantCode(t, err, map[bool]codes.Code{true: codes.OK, false: codes.Unimplemented}[tt.ctrlOK])
			_, err = c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
			wantCode(t, err, map[bool]codes.Code{true: codes.OK, false: codes.Unimplemented}[tt.nodeOK])
			_, err = c.id.Probe(ctx, &csipb.ProbeRequest{})
			noErr(t, err)
		})
	}
}
