package hostpath_test

import (
	"context"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// A node "exists" for the controller once a node plugin with that node ID
// has served on the shared data dir; these tests pin that ControllerPublish
// to any other node ID is NotFound (CSI spec, ControllerPublishVolume
// errors: "Node does not exist").

func TestPlugin_ControllerPublish_UnknownNode_Monolith(t *testing.T) {
	ctx := context.Background()
	h := start(t, fullConfig(hostpath.MountSymlink))
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(mnmw)}})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()

	_, err = h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-9", VolumeCapability: mountCap(mnmw)})
	requireCode(t, codes.NotFound, err)
	must.ErrorContains(t, err, `"node-9"`, "the error names the node")
	_, err = h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(mnmw)})
	must.NoError(t, err, "the monolith's own node exists")

	g, err := h.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
	must.NoError(t, err)
	must.Equal(t, []string{"node-1"}, g.GetStatus().GetPublishedNodeIds(), "the refused publish recorded nothing")
}

func TestPlugin_ControllerPublish_UnknownNode_Split(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	ctrl := start(t, hostpath.Config{Mode: hostpath.ModeController, DataDir: data, NodeID: "ctrl-host", ControllerPublish: true, Staging: true})
	cv, err := ctrl.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(mnmw)}})
	must.NoError(t, err)
	publish := func(node string) error {
		_, err := ctrl.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
			VolumeId: cv.GetVolume().GetVolumeId(), NodeId: node, VolumeCapability: mountCap(mnmw)})
		return err
	}

	requireCode(t, codes.NotFound, publish("node-1"))
	requireCode(t, codes.NotFound, publish("ctrl-host")) // a controller plugin is no node

	n1 := start(t, hostpath.Config{Mode: hostpath.ModeNode, DataDir: data, NodeID: "node-1", ControllerPublish: true, Staging: true})
	must.NoError(t, publish("node-1"), "a node plugin that serves on the data dir registers its node")
	requireCode(t, codes.NotFound, publish("node-2"))

	n1.stop()
	must.NoError(t, publish("node-1"), "a repeated publish to a stopped node is still OK: the node is known")
	n2 := start(t, hostpath.Config{Mode: hostpath.ModeNode, DataDir: data, NodeID: "node-2", ControllerPublish: true, Staging: true})
	n2.stop()
	must.NoError(t, publish("node-2"), "a node that served once stays known while it is down")
}

// TestPlugin_ControllerPublish_UnknownNode_CodeOrder pins that an unknown
// volume is reported as such even when the node is unknown too: both are
// NotFound, and the message names the volume first.
func TestPlugin_ControllerPublish_UnknownNode_CodeOrder(t *testing.T) {
	h := start(t, fullConfig(hostpath.MountSymlink))
	_, err := h.ctrl.ControllerPublishVolume(context.Background(), &csipb.ControllerPublishVolumeRequest{
		VolumeId: unknownVol, NodeId: "node-9", VolumeCapability: mountCap(snw)})
	requireCode(t, codes.NotFound, err)
	must.ErrorContains(t, status.Convert(err).Err(), unknownVol)
}
