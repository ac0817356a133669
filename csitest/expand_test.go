package csitest_test

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csitest"
)

func TestPlugin_Expansion_OfflineKnob(t *testing.T) {
	for _, tt := range []struct {
		name    string
		offline bool
		want    csipb.PluginCapability_VolumeExpansion_Type
		code    codes.Code // ControllerExpandVolume of a staged volume
	}{
		{"online", false, csipb.PluginCapability_VolumeExpansion_ONLINE, codes.OK},
		{"offline", true, csipb.PluginCapability_VolumeExpansion_OFFLINE, codes.FailedPrecondition},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fullConfig
			cfg.OfflineExpansion = tt.offline
			p, c := start(t, cfg)
			ctx := ctxT(t)
			resp, err := c.id.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
			noErr(t, err)
			var got []csipb.PluginCapability_VolumeExpansion_Type
			for _, pc := range resp.GetCapabilities() {
				if e := pc.GetVolumeExpansion(); e != nil {
					got = append(got, e.GetType())
				}
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("VolumeExpansion capabilities %v, want [%v]", got, tt.want)
			}

			p.AddVolume("v1", 1<<20, nil)
			grow := &csipb.ControllerExpandVolumeRequest{VolumeId: "v1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 20}}
			_, err = c.ctrl.ControllerExpandVolume(ctx, grow)
			noErr(t, err) // not in use: both expand
			staging, _ := paths(t)
			_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: staging, VolumeCapability: mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)})
			noErr(t, err)
			grow.CapacityRange.RequiredBytes = 4 << 20
			_, err = c.ctrl.ControllerExpandVolume(ctx, grow)
			wantCode(t, err, tt.code)
		})
	}
}

func TestPlugin_Checker_NodeExpandBeforeControllerExpand(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	p.AddVolume("v1", 1<<20, nil)
	capab := mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "v1", NodeId: "csitest-node", VolumeCapability: capab})
	noErr(t, err)
	staging, _ := paths(t)
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: staging, VolumeCapability: capab,
		PublishContext: map[string]string{"devicePath": "/dev/fake-v1"}})
	noErr(t, err)

	node := &csipb.NodeExpandVolumeRequest{VolumeId: "v1", VolumePath: staging, StagingTargetPath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 20}}
	_, err = c.node.NodeExpandVolume(ctx, node)
	noErr(t, err)
	vs := p.Violations()
	if len(vs) != 1 || vs[0].Rule != csitest.RuleNodeExpandFirst {
		t.Fatalf("violations %v, want one %s", vs, csitest.RuleNodeExpandFirst)
	}

	// In order: controller first, then node. No violation.
	p.ResetViolations()
	_, err = c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 4 << 20}})
	noErr(t, err)
	node.CapacityRange.RequiredBytes = 4 << 20
	_, err = c.node.NodeExpandVolume(ctx, node)
	noErr(t, err)
	p.RequireNoViolations(t)
}
