package hostpath_test

import (
	"context"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

func TestPlugin_Expand_ControllerThenNode(t *testing.T) {
	ctx := context.Background()
	h := start(t, fullConfig(hostpath.MountSymlink))
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "grow", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20}})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()
	cp, err := h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	base := pathDir(t)
	staging, target := filepath.Join(base, "s"), filepath.Join(base, "t")
	_, err = h.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	_, err = h.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap(snw)})
	must.NoError(t, err)

	ce, err := h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 4 << 20}})
	must.NoError(t, err)
	must.Equal(t, int64(4<<20), ce.GetCapacityBytes())
	must.True(t, ce.GetNodeExpansionRequired(), "the controller asks for the node step")

	grow := &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, StagingTargetPath: staging, CapacityRange: &csipb.CapacityRange{RequiredBytes: 4 << 20}}
	ne, err := h.node.NodeExpandVolume(ctx, grow)
	must.NoError(t, err)
	must.Equal(t, int64(4<<20), ne.GetCapacityBytes())

	// The node's record survives a restart, and the volume does not shrink.
	h.restart()
	grow.CapacityRange = &csipb.CapacityRange{RequiredBytes: 1 << 20}
	ne, err = h.node.NodeExpandVolume(ctx, grow)
	must.NoError(t, err)
	must.Equal(t, int64(4<<20), ne.GetCapacityBytes(), "the recorded size after a restart")
	grow.CapacityRange = &csipb.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 2 << 20}
	_, err = h.node.NodeExpandVolume(ctx, grow)
	requireCode(t, codes.OutOfRange, err)

	for _, r := range []*csipb.NodeExpandVolumeRequest{
		{VolumePath: target}, // no volume ID
		{VolumeId: id},       // no volume path
		{VolumeId: id, VolumePath: target, VolumeCapability: blockCap(snw)},
	} {
		_, err := h.node.NodeExpandVolume(ctx, r)
		requireCode(t, codes.InvalidArgument, err)
	}
	_, err = h.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: base})
	requireCode(t, codes.NotFound, err) // not staged or published there
}

func TestPlugin_ModifyVolume_Label(t *testing.T) {
	ctx := context.Background()
	h := start(t, fullConfig(hostpath.MountSymlink))
	label := map[string]string{hostpath.LabelParameter: "gold"}
	_, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "bad", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		MutableParameters: map[string]string{"iops": "1"}})
	requireCode(t, codes.InvalidArgument, err)
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "m", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, MutableParameters: label})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()

	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{hostpath.LabelParameter: "silver"}})
	must.NoError(t, err)
	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"XXX": "y"}})
	requireCode(t, codes.InvalidArgument, err)
	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id})
	requireCode(t, codes.InvalidArgument, err)
	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{MutableParameters: label})
	requireCode(t, codes.InvalidArgument, err)
	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: "nope", MutableParameters: label})
	requireCode(t, codes.NotFound, err)
	h.restart()
	_, err = h.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{hostpath.LabelParameter: "silver"}})
	must.NoError(t, err, "a repeated modify after a restart")
}
