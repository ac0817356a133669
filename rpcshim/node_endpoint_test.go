package rpcshim_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
)

func TestNewNodeEndpoint_Config(t *testing.T) {
	tests := []struct {
		name     string
		cfg      rpcshim.NodeEndpointConfig
		sentinel error
		contains string
	}{
		{"no node ID", rpcshim.NodeEndpointConfig{Plugins: &epPlugins{}, Mounter: &epUnmounter{}}, csi.ErrInvalidID, "NodeID"},
		{"bad node ID", rpcshim.NodeEndpointConfig{NodeID: "a/b", Plugins: &epPlugins{}, Mounter: &epUnmounter{}}, csi.ErrInvalidID, "NodeID"},
		{"no plugins", rpcshim.NodeEndpointConfig{NodeID: "n1", Mounter: &epUnmounter{}}, csi.ErrInvalidRequest, "Plugins"},
		{"no mounter", rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: &epPlugins{}}, csi.ErrInvalidRequest, "Mounter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := rpcshim.NewNodeEndpoint(tc.cfg)
			expectIs(t, err, tc.sentinel)
			expectContains(t, err.Error(), tc.contains)
			if ep != nil {
				t.Error("got an endpoint with an invalid config")
			}
		})
	}
}

// TestNodeEndpoint_ControllerMethods sends every controller method
// through the router to a node endpoint and a fake plugin, and checks
// what the plugin got and what came back.
func TestNodeEndpoint_ControllerMethods(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	ctx := context.Background()
	q := rpcshim.CSIControllerQuery{PluginID: rtPlugin}
	r := e.router

	created, err := r.CreateVolume(ctx, &rpcshim.CreateVolumeRequest{CSIControllerQuery: q, CreateVolumeRequest: plugin.CreateVolumeRequest{
		Name: "data", CapacityMin: 1 << 20, Capabilities: []csi.Capability{snwFS}, Parameters: map[string]string{"tier": "fast"},
	}})
	must(t, err)
	expectEqual(t, created.ControllerNodeID, "n1")
	ext := created.Volume.ExternalID
	if ext == "" || created.Volume.Capacity < 1<<20 {
		t.Fatalf("created volume %+v", created.Volume)
	}

	val, err := r.ValidateVolumeCapabilities(ctx, &rpcshim.ValidateCapabilitiesRequest{CSIControllerQuery: q,
		ValidateCapabilitiesRequest: plugin.ValidateCapabilitiesRequest{ExternalID: ext, Capabilities: []csi.Capability{snwFS}}})
	must(t, err)
	expectEqual(t, val.Confirmed, true)

	list, err := r.ListVolumes(ctx, &rpcshim.ListVolumesRequest{CSIControllerQuery: q})
	must(t, err)
	expectEqual(t, len(list.Entries), 1)
	expectEqual(t, list.Entries[0].Volume.ExternalID, ext)

	pub, err := r.ControllerPublish(ctx, rtPublishRequestFor(ext, "csi-n2"))
	must(t, err)
	expectEqual(t, pub.PublishContext, map[string]string{"devicePath": "/dev/fake-" + ext})
	unpub := &rpcshim.ControllerUnpublishRequest{CSIControllerQuery: q}
	unpub.ExternalID, unpub.ExternalNodeID = ext, "csi-n2"
	_, err = r.ControllerUnpublish(ctx, unpub)
	must(t, err)

	exp, err := r.ExpandVolume(ctx, &rpcshim.ExpandVolumeRequest{CSIControllerQuery: q,
		ControllerExpandRequest: plugin.ControllerExpandRequest{ExternalID: ext, CapacityMin: 2 << 30}})
	must(t, err)
	if exp.Capacity < 2<<30 {
		t.Errorf("expanded to %d bytes, want at least %d", exp.Capacity, 2<<30)
	}

	snap, err := r.CreateSnapshot(ctx, &rpcshim.CreateSnapshotRequest{CSIControllerQuery: q,
		CreateSnapshotRequest: plugin.CreateSnapshotRequest{SourceID: ext, Name: "snap"}})
	must(t, err)
	expectEqual(t, snap.Snapshot.SourceID, ext)
	snaps, err := r.ListSnapshots(ctx, &rpcshim.ListSnapshotsRequest{CSIControllerQuery: q,
		ListSnapshotsRequest: plugin.ListSnapshotsRequest{SourceID: ext}})
	must(t, err)
	expectEqual(t, len(snaps.Entries), 1)
	_, err = r.DeleteSnapshot(ctx, &rpcshim.DeleteSnapshotRequest{CSIControllerQuery: q,
		DeleteSnapshotRequest: plugin.DeleteSnapshotRequest{ID: snap.Snapshot.ID}})
	must(t, err)
	_, err = r.DeleteVolume(ctx, &rpcshim.DeleteVolumeRequest{CSIControllerQuery: q,
		DeleteVolumeRequest: plugin.DeleteVolumeRequest{ExternalID: ext}})
	must(t, err)

	expectEqual(t, e.ctl.Methods(), []string{
		csitest.MethodCreateVolume, csitest.MethodValidateVolumeCapabilities, csitest.MethodListVolumes,
		csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume, csitest.MethodControllerExpandVolume,
		csitest.MethodCreateSnapshot, csitest.MethodListSnapshots, csitest.MethodDeleteSnapshot, csitest.MethodDeleteVolume,
	})
	e.ctl.RequireNoViolations(t)
}

func rtPublishRequestFor(external, csiNode string) *rpcshim.ControllerPublishRequest {
	r := rtPublishRequest("", csiNode)
	r.ExternalID = external
	r.Secrets = nil
	return r
}

// TestNodeEndpoint_Errors checks the errors a node endpoint sends back
// and that each keeps its meaning on the server.
func TestNodeEndpoint_Errors(t *testing.T) {
	ctx := context.Background()
	t.Run("plugin not on this node", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		req := rtPublishRequest("n2", "csi-n2")
		err := e.tr.Call(ctx, "n2", rpcshim.MethodControllerPublish, req, &rpcshim.ControllerPublishResponse{})
		expectIs(t, err, csi.ErrPluginNotFound)
		expectClass(t, err, csi.ClassRetryable)
		expectContains(t, err.Error(), "ControllerPublishVolume on node n2")
	})
	t.Run("unhealthy instance", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		client, _, err := e.plugins.ControllerPlugin(rtPlugin)
		must(t, err)
		e.plugins.set(rtPlugin, client, &csi.PluginInfo{PluginID: rtPlugin, Healthy: false, HealthDescription: "probe failed"})
		err = e.tr.Call(ctx, "n1", rpcshim.MethodControllerPublish, rtPublishRequest("n1", "csi-n2"), nil)
		expectIs(t, err, csi.ErrPluginUnhealthy)
		expectClass(t, err, csi.ClassRetryable)
		expectContains(t, err.Error(), "probe failed")
		expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 0)
	})
	t.Run("meant for another node", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		err := e.tr.Call(ctx, "n1", rpcshim.MethodControllerPublish, rtPublishRequest("n3", "csi-n2"), nil)
		expectIs(t, err, csi.ErrUnavailable)
		expectContains(t, err.Error(), "meant for node n3 but reached node n1")
		err = e.tr.Call(ctx, "n1", rpcshim.MethodNodeDetach, &rpcshim.NodeDetachRequest{NodeID: "n2", Namespace: "default", VolumeID: "v", AllocationID: "a"}, nil)
		expectIs(t, err, csi.ErrUnavailable)
		expectEqual(t, len(e.ctl.Calls()), 0)
		expectEqual(t, len(e.unmounter.requests()), 0)
	})
	t.Run("plugin code survives", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := e.router.ControllerPublish(ctx, rtPublishRequestFor("no-such-volume", "csi-n2"))
		mustErr(t, err)
		expectEqual(t, csi.CodeOf(err), csi.CodeNotFound)
		var rpc *csi.RPCError
		if !errors.As(err, &rpc) || rpc.Method != "ControllerPublishVolume" {
			t.Errorf("error %v does not hold the plugin's ControllerPublishVolume RPCError", err)
		}
		expectClass(t, err, csi.ClassFinal)
	})
	t.Run("invalid request is refused by the plugin client", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		_, err := e.router.ControllerPublish(ctx, rtPublishRequestFor("", "csi-n2"))
		expectIs(t, err, csi.ErrInvalidRequest)
		expectClass(t, err, csi.ClassFinal)
		expectEqual(t, len(e.ctl.Calls()), 0)
	})
	t.Run("bad plugin ID", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		req := rtPublishRequest("n1", "csi-n2")
		req.PluginID = "../p"
		err := e.tr.Call(ctx, "n1", rpcshim.MethodControllerPublish, req, nil)
		expectIs(t, err, csi.ErrInvalidID)
	})
	t.Run("secret stays out of errors", func(t *testing.T) {
		e := newSrvEnv(t, allControllerCaps)
		req := rtPublishRequestFor("no-such-volume", "csi-n2")
		req.Secrets = csi.Secrets{"token": "very-secret-value"}
		_, err := e.router.ControllerPublish(ctx, req)
		mustErr(t, err)
		if s := err.Error(); strings.Contains(s, "very-secret-value") {
			t.Errorf("error leaks a secret: %s", s)
		}
	})
}

// TestNodeEndpoint_NodeDetach checks that node detach reaches the
// mounter with the claim's usage, and that its errors keep their class.
func TestNodeEndpoint_NodeDetach(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	vol := &csi.Volume{ID: "vol-1", Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-1"}
	claim := &csi.Claim{AllocationID: "a1", NodeID: "n2", ExternalNodeID: "csi-n2", Mode: csi.ClaimRead,
		AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem}
	must(t, e.router.NodeDetach(context.Background(), vol, claim))
	expectEqual(t, e.unmounter.requests(), []mounter.UnmountRequest{{
		Namespace: "default", VolumeID: "vol-1", AllocationID: "a1",
		Usage: mounter.Usage{ClaimMode: csi.ClaimRead, AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem},
	}})

	// Without a usage, every usage of the allocation is unmounted.
	must(t, e.tr.Call(context.Background(), "n2", rpcshim.MethodNodeDetach,
		&rpcshim.NodeDetachRequest{NodeID: "n2", Namespace: "default", VolumeID: "vol-1", AllocationID: "a1"}, nil))
	expectEqual(t, e.unmounter.requests()[1], mounter.UnmountRequest{Namespace: "default", VolumeID: "vol-1", AllocationID: "a1"})

	e.unmounter.err = errors.Join(errors.New("node plugin p1 is not running"), csi.ErrPluginNotFound)
	err := e.router.NodeDetach(context.Background(), vol, claim)
	expectIs(t, err, csi.ErrPluginNotFound)
	expectClass(t, err, csi.ClassRetryable)
	expectContains(t, err.Error(), "on node n2")
}

// TestNodeEndpoint_Mux checks that a node agent can serve its own
// methods beside the endpoint's.
func TestNodeEndpoint_Mux(t *testing.T) {
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: &epPlugins{}, Mounter: &epUnmounter{}})
	must(t, err)
	rpcshim.Handle(ep.Mux(), "Agent.Ping", func(context.Context, *pingRequest) (*pingReply, error) {
		return &pingReply{Answer: "pong"}, nil
	})
	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", ep)
	var reply pingReply
	must(t, tr.Call(context.Background(), "n1", "Agent.Ping", &pingRequest{}, &reply))
	expectEqual(t, reply.Answer, "pong")
}
