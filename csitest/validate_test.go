package csitest_test

import (
	"context"
	"fmt"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
)

// TestPlugin_Validation_Messages pins the status code and the whole
// message of every request check the handlers share, RPC by RPC.
func TestPlugin_Validation_Messages(t *testing.T) {
	p, c := start(t, fullConfig)
	p.AddVolume("v", 1<<20, nil)
	staging, target := paths(t)
	vc := mountCap(snw)
	noType := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: snw}}
	badMode := mountCap(csipb.VolumeCapability_AccessMode_UNKNOWN)
	caps := []*csipb.VolumeCapability{vc}
	badRange := &csipb.CapacityRange{RequiredBytes: 5, LimitBytes: 1}

	tests := []struct {
		name string
		call func(ctx context.Context) error
		code codes.Code
		msg  string
	}{
		{"CreateVolume no name", func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{VolumeCapabilities: caps})
			return err
		}, codes.InvalidArgument, "CreateVolume: name is required"},
		{"CreateVolume no capabilities", func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "a"})
			return err
		}, codes.InvalidArgument, "CreateVolume: volume_capabilities is required"},
		{"CreateVolume empty second capability", func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{vc, {}}})
			return err
		}, codes.InvalidArgument, "CreateVolume: volume_capabilities[1] has no access type; set block or mount"},
		{"CreateVolume bad access mode", func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{badMode}})
			return err
		}, codes.InvalidArgument, fmt.Sprintf("CreateVolume: volume_capabilities[0] has access mode %s; use a defined CSI access mode", csi.AccessMode(0))},
		{"CreateVolume bad range", func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps, CapacityRange: badRange})
			return err
		}, codes.OutOfRange, "CreateVolume: capacity range [5, 1] is not satisfiable"},
		{"DeleteVolume no volume ID", func(ctx context.Context) error {
			_, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{})
			return err
		}, codes.InvalidArgument, "DeleteVolume: volume_id is required"},
		{"ControllerPublishVolume no node ID", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "v", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, "ControllerPublishVolume: node_id is required"},
		{"ControllerPublishVolume no capability", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "n"})
			return err
		}, codes.InvalidArgument, "ControllerPublishVolume: volume_capability is required"},
		{"ControllerPublishVolume unknown volume", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "nope", NodeId: "n", VolumeCapability: vc})
			return err
		}, codes.NotFound, `ControllerPublishVolume: volume "nope" does not exist`},
		{"ControllerUnpublishVolume no volume ID", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{NodeId: "n"})
			return err
		}, codes.InvalidArgument, "ControllerUnpublishVolume: volume_id is required"},
		{"ValidateVolumeCapabilities no volume ID", func(ctx context.Context) error {
			_, err := c.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: caps})
			return err
		}, codes.InvalidArgument, "ValidateVolumeCapabilities: volume_id is required"},
		{"ValidateVolumeCapabilities no capabilities", func(ctx context.Context) error {
			_, err := c.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument, "ValidateVolumeCapabilities: volume_capabilities is required"},
		{"ValidateVolumeCapabilities unknown volume", func(ctx context.Context) error {
			_, err := c.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "nope", VolumeCapabilities: caps})
			return err
		}, codes.NotFound, `ValidateVolumeCapabilities: volume "nope" does not exist`},
		{"GetCapacity bad capability", func(ctx context.Context) error {
			_, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{noType}})
			return err
		}, codes.InvalidArgument, "GetCapacity: volume_capabilities[0] has no access type; set block or mount"},
		{"CreateSnapshot no source", func(ctx context.Context) error {
			_, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s"})
			return err
		}, codes.InvalidArgument, "CreateSnapshot: source_volume_id is required"},
		{"CreateSnapshot no name", func(ctx context.Context) error {
			_, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: "v"})
			return err
		}, codes.InvalidArgument, "CreateSnapshot: name is required"},
		{"DeleteSnapshot no snapshot ID", func(ctx context.Context) error {
			_, err := c.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{})
			return err
		}, codes.InvalidArgument, "DeleteSnapshot: snapshot_id is required"},
		{"GetSnapshot no snapshot ID", func(ctx context.Context) error {
			_, err := c.ctrl.GetSnapshot(ctx, &csipb.GetSnapshotRequest{})
			return err
		}, codes.InvalidArgument, "GetSnapshot: snapshot_id is required"},
		{"ControllerExpandVolume no range", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument, "ControllerExpandVolume: capacity_range is required"},
		{"ControllerExpandVolume bad capability", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}, VolumeCapability: noType})
			return err
		}, codes.InvalidArgument, "ControllerExpandVolume: volume_capability has no access type; set block or mount"},
		{"ControllerExpandVolume bad range", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: badRange})
			return err
		}, codes.OutOfRange, "ControllerExpandVolume: capacity range [5, 1] is not satisfiable"},
		{"ControllerGetVolume unknown volume", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: "nope"})
			return err
		}, codes.NotFound, `ControllerGetVolume: volume "nope" does not exist`},
		{"ControllerModifyVolume no parameters", func(ctx context.Context) error {
			_, err := c.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument, "ControllerModifyVolume: mutable_parameters is required"},
		{"NodeStageVolume no staging path", func(ctx context.Context) error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, "NodeStageVolume: staging_target_path is required"},
		{"NodeStageVolume no capability", func(ctx context.Context) error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument, "NodeStageVolume: volume_capability is required"},
		{"NodeStageVolume relative path", func(ctx context.Context) error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "rel", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, `NodeStageVolume: staging_target_path "rel" must be an absolute path`},
		{"NodeStageVolume unknown volume", func(ctx context.Context) error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "nope", StagingTargetPath: staging, VolumeCapability: vc})
			return err
		}, codes.NotFound, `NodeStageVolume: volume "nope" does not exist; create it, or AddVolume it to the fake first`},
		{"NodeUnstageVolume no volume ID", func(ctx context.Context) error {
			_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument, "NodeUnstageVolume: volume_id is required"},
		{"NodePublishVolume no target", func(ctx context.Context) error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, "NodePublishVolume: target_path is required"},
		{"NodePublishVolume relative target", func(ctx context.Context) error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "rel", StagingTargetPath: "rel2", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, `NodePublishVolume: target_path "rel" must be an absolute path`},
		{"NodePublishVolume relative staging path", func(ctx context.Context) error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, StagingTargetPath: "rel", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument, `NodePublishVolume: staging_target_path "rel" must be an absolute path`},
		{"NodeUnpublishVolume no target", func(ctx context.Context) error {
			_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument, "NodeUnpublishVolume: target_path is required"},
		{"NodeGetVolumeStats no path", func(ctx context.Context) error {
			_, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument, "NodeGetVolumeStats: volume_path is required"},
		{"NodeGetVolumeStats unknown volume", func(ctx context.Context) error {
			_, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "nope", VolumePath: staging})
			return err
		}, codes.NotFound, `NodeGetVolumeStats: volume "nope" does not exist`},
		{"NodeExpandVolume bad capability", func(ctx context.Context) error {
			_, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: staging, VolumeCapability: badMode})
			return err
		}, codes.InvalidArgument, fmt.Sprintf("NodeExpandVolume: volume_capability has access mode %s; use a defined CSI access mode", csi.AccessMode(0))},
		{"NodeExpandVolume bad range", func(ctx context.Context) error {
			_, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: staging, CapacityRange: badRange})
			return err
		}, codes.OutOfRange, "NodeExpandVolume: capacity range [5, 1] is not satisfiable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(ctxT(t))
			st := status.Convert(err)
			if st.Code() != tt.code || st.Message() != "csitest: "+tt.msg {
				t.Errorf("got %s %q, want %s %q", st.Code(), st.Message(), tt.code, "csitest: "+tt.msg)
			}
		})
	}
}
