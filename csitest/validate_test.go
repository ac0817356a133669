package csitest_test

import (
	"fmt"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

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

	// Each case is a real call over the socket; the reply is never read,
	// since every case fails.
	tests := []struct {
		name   string
		method string
		req    proto.Message
		code   codes.Code
		msg    string
	}{
		{"CreateVolume no name", csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{VolumeCapabilities: caps},
			codes.InvalidArgument, "CreateVolume: name is required"},
		{"CreateVolume no capabilities", csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "a"},
			codes.InvalidArgument, "CreateVolume: volume_capabilities is required"},
		{"CreateVolume empty second capability", csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{vc, {}}},
			codes.InvalidArgument, "CreateVolume: volume_capabilities[1] has no access type; set block or mount"},
		{"CreateVolume bad access mode", csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{badMode}},
			codes.InvalidArgument, fmt.Sprintf("CreateVolume: volume_capabilities[0] has access mode %s; use a defined CSI access mode", csi.AccessMode(0))},
		{"CreateVolume bad range", csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps, CapacityRange: badRange},
			codes.OutOfRange, "CreateVolume: capacity range [5, 1] is not satisfiable"},
		{"DeleteVolume no volume ID", csipb.Controller_DeleteVolume_FullMethodName, &csipb.DeleteVolumeRequest{},
			codes.InvalidArgument, "DeleteVolume: volume_id is required"},
		{"ControllerPublishVolume no node ID", csipb.Controller_ControllerPublishVolume_FullMethodName, &csipb.ControllerPublishVolumeRequest{VolumeId: "v", VolumeCapability: vc},
			codes.InvalidArgument, "ControllerPublishVolume: node_id is required"},
		{"ControllerPublishVolume no capability", csipb.Controller_ControllerPublishVolume_FullMethodName, &csipb.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "n"},
			codes.InvalidArgument, "ControllerPublishVolume: volume_capability is required"},
		{"ControllerPublishVolume unknown volume", csipb.Controller_ControllerPublishVolume_FullMethodName, &csipb.ControllerPublishVolumeRequest{VolumeId: "nope", NodeId: "n", VolumeCapability: vc},
			codes.NotFound, `ControllerPublishVolume: volume "nope" does not exist`},
		{"ControllerUnpublishVolume no volume ID", csipb.Controller_ControllerUnpublishVolume_FullMethodName, &csipb.ControllerUnpublishVolumeRequest{NodeId: "n"},
			codes.InvalidArgument, "ControllerUnpublishVolume: volume_id is required"},
		{"ValidateVolumeCapabilities no volume ID", csipb.Controller_ValidateVolumeCapabilities_FullMethodName, &csipb.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: caps},
			codes.InvalidArgument, "ValidateVolumeCapabilities: volume_id is required"},
		{"ValidateVolumeCapabilities no capabilities", csipb.Controller_ValidateVolumeCapabilities_FullMethodName, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "v"},
			codes.InvalidArgument, "ValidateVolumeCapabilities: volume_capabilities is required"},
		{"ValidateVolumeCapabilities unknown volume", csipb.Controller_ValidateVolumeCapabilities_FullMethodName, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "nope", VolumeCapabilities: caps},
			codes.NotFound, `ValidateVolumeCapabilities: volume "nope" does not exist`},
		{"GetCapacity bad capability", csipb.Controller_GetCapacity_FullMethodName, &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{noType}},
			codes.InvalidArgument, "GetCapacity: volume_capabilities[0] has no access type; set block or mount"},
		{"CreateSnapshot no source", csipb.Controller_CreateSnapshot_FullMethodName, &csipb.CreateSnapshotRequest{Name: "s"},
			codes.InvalidArgument, "CreateSnapshot: source_volume_id is required"},
		{"CreateSnapshot no name", csipb.Controller_CreateSnapshot_FullMethodName, &csipb.CreateSnapshotRequest{SourceVolumeId: "v"},
			codes.InvalidArgument, "CreateSnapshot: name is required"},
		{"DeleteSnapshot no snapshot ID", csipb.Controller_DeleteSnapshot_FullMethodName, &csipb.DeleteSnapshotRequest{},
			codes.InvalidArgument, "DeleteSnapshot: snapshot_id is required"},
		{"GetSnapshot no snapshot ID", csipb.Controller_GetSnapshot_FullMethodName, &csipb.GetSnapshotRequest{},
			codes.InvalidArgument, "GetSnapshot: snapshot_id is required"},
		{"ControllerExpandVolume no range", csipb.Controller_ControllerExpandVolume_FullMethodName, &csipb.ControllerExpandVolumeRequest{VolumeId: "v"},
			codes.InvalidArgument, "ControllerExpandVolume: capacity_range is required"},
		{"ControllerExpandVolume bad capability", csipb.Controller_ControllerExpandVolume_FullMethodName, &csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}, VolumeCapability: noType},
			codes.InvalidArgument, "ControllerExpandVolume: volume_capability has no access type; set block or mount"},
		{"ControllerExpandVolume bad range", csipb.Controller_ControllerExpandVolume_FullMethodName, &csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: badRange},
			codes.OutOfRange, "ControllerExpandVolume: capacity range [5, 1] is not satisfiable"},
		{"ControllerGetVolume unknown volume", csipb.Controller_ControllerGetVolume_FullMethodName, &csipb.ControllerGetVolumeRequest{VolumeId: "nope"},
			codes.NotFound, `ControllerGetVolume: volume "nope" does not exist`},
		{"ControllerModifyVolume no parameters", csipb.Controller_ControllerModifyVolume_FullMethodName, &csipb.ControllerModifyVolumeRequest{VolumeId: "v"},
			codes.InvalidArgument, "ControllerModifyVolume: mutable_parameters is required"},
		{"NodeStageVolume no staging path", csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: vc},
			codes.InvalidArgument, "NodeStageVolume: staging_target_path is required"},
		{"NodeStageVolume no capability", csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging},
			codes.InvalidArgument, "NodeStageVolume: volume_capability is required"},
		{"NodeStageVolume relative path", csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "rel", VolumeCapability: vc},
			codes.InvalidArgument, `NodeStageVolume: staging_target_path "rel" must be an absolute path`},
		{"NodeStageVolume unknown volume", csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{VolumeId: "nope", StagingTargetPath: staging, VolumeCapability: vc},
			codes.NotFound, `NodeStageVolume: volume "nope" does not exist; create it, or AddVolume it to the fake first`},
		{"NodeUnstageVolume no volume ID", csipb.Node_NodeUnstageVolume_FullMethodName, &csipb.NodeUnstageVolumeRequest{StagingTargetPath: staging},
			codes.InvalidArgument, "NodeUnstageVolume: volume_id is required"},
		{"NodePublishVolume no target", csipb.Node_NodePublishVolume_FullMethodName, &csipb.NodePublishVolumeRequest{VolumeId: "v", VolumeCapability: vc},
			codes.InvalidArgument, "NodePublishVolume: target_path is required"},
		{"NodePublishVolume no capability", csipb.Node_NodePublishVolume_FullMethodName, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target},
			codes.InvalidArgument, "NodePublishVolume: volume_capability is required"},
		{"NodePublishVolume relative target", csipb.Node_NodePublishVolume_FullMethodName, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "rel", StagingTargetPath: "rel2", VolumeCapability: vc},
			codes.InvalidArgument, `NodePublishVolume: target_path "rel" must be an absolute path`},
		{"NodePublishVolume relative staging path", csipb.Node_NodePublishVolume_FullMethodName, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, StagingTargetPath: "rel", VolumeCapability: vc},
			codes.InvalidArgument, `NodePublishVolume: staging_target_path "rel" must be an absolute path`},
		{"NodeUnpublishVolume no target", csipb.Node_NodeUnpublishVolume_FullMethodName, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v"},
			codes.InvalidArgument, "NodeUnpublishVolume: target_path is required"},
		{"NodeGetVolumeStats no path", csipb.Node_NodeGetVolumeStats_FullMethodName, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v"},
			codes.InvalidArgument, "NodeGetVolumeStats: volume_path is required"},
		{"NodeGetVolumeStats unknown volume", csipb.Node_NodeGetVolumeStats_FullMethodName, &csipb.NodeGetVolumeStatsRequest{VolumeId: "nope", VolumePath: staging},
			codes.NotFound, `NodeGetVolumeStats: volume "nope" does not exist`},
		{"NodeExpandVolume bad capability", csipb.Node_NodeExpandVolume_FullMethodName, &csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: staging, VolumeCapability: badMode},
			codes.InvalidArgument, fmt.Sprintf("NodeExpandVolume: volume_capability has access mode %s; use a defined CSI access mode", csi.AccessMode(0))},
		{"NodeExpandVolume bad range", csipb.Node_NodeExpandVolume_FullMethodName, &csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: staging, CapacityRange: badRange},
			codes.OutOfRange, "NodeExpandVolume: capacity range [5, 1] is not satisfiable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.conn.Invoke(ctxT(t), tt.method, tt.req, &emptypb.Empty{})
			st := status.Convert(err)
			if st.Code() != tt.code || st.Message() != "csitest: "+tt.msg {
				t.Errorf("got %s %q, want %s %q", st.Code(), st.Message(), tt.code, "csitest: "+tt.msg)
			}
		})
	}
}
