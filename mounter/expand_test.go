package mounter_test

import (
	"errors"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

func TestMounter_ExpandVolume(t *testing.T) {
	e := newEnv(t, csi.NodeCapabilities{StageUnstageVolume: true, ExpandVolume: true})
	e.volume("v1")
	m := e.mounter()
	ctx := t.Context()
	req := &mounter.ExpandRequest{Namespace: testNS, VolumeID: "v1", RequiredBytes: 2 << 30, Secrets: csi.Secrets{"k": "s"}}

	// Nothing mounted: no call.
	res, err := m.ExpandVolume(ctx, req)
	if err != nil || res.Mounted {
		t.Fatalf("expand of an unmounted volume = %+v, %v; want not mounted", res, err)
	}
	if n := e.p.CallCount(csitest.MethodNodeExpandVolume); n != 0 {
		t.Fatalf("%d NodeExpandVolume calls for an unmounted volume", n)
	}

	info := mustMount(t, m, mountReq("v1", "a1"))
	res, err = m.ExpandVolume(ctx, req)
	if err != nil || !res.Mounted || res.Capacity != 2<<30 {
		t.Fatalf("expand = %+v, %v; want mounted, 2 GiB", res, err)
	}
	calls := e.p.CallsTo(csitest.MethodNodeExpandVolume)
	if len(calls) != 1 {
		t.Fatalf("%d NodeExpandVolume calls, want 1", len(calls))
	}
	got := calls[0].Request.(*csipb.NodeExpandVolumeRequest)
	stage := e.p.CallsTo(csitest.MethodNodeStageVolume)[0].Request.(*csipb.NodeStageVolumeRequest)
	if got.GetVolumePath() != info.Path || got.GetStagingTargetPath() != stage.GetStagingTargetPath() || got.GetVolumeId() != "ext-v1" {
		t.Errorf("NodeExpandVolume at %q (staging %q, volume %q); want target %q, staging %q, ext-v1",
			got.GetVolumePath(), got.GetStagingTargetPath(), got.GetVolumeId(), info.Path, stage.GetStagingTargetPath())
	}

	for _, bad := range []*mounter.ExpandRequest{
		nil,
		{Namespace: testNS, VolumeID: "v1"},
		{Namespace: testNS, VolumeID: "v1", RequiredBytes: 2, LimitBytes: 1},
		{Namespace: testNS, VolumeID: "../x", RequiredBytes: 2},
	} {
		if _, err := m.ExpandVolume(ctx, bad); !errors.Is(err, csi.ErrInvalidRequest) && !errors.Is(err, csi.ErrInvalidID) {
			t.Errorf("ExpandVolume(%+v) = %v, want an invalid request", bad, err)
		}
	}
	if n := e.p.CallCount(csitest.MethodNodeExpandVolume); n != 1 {
		t.Errorf("invalid requests reached the plugin: %d calls", n)
	}
}

func TestMounter_ExpandVolume_NodeWithoutExpansion(t *testing.T) {
	caps := csi.NodeCapabilities{StageUnstageVolume: true}
	e := newEnv(t, caps)
	e.reg.info = &csi.PluginInfo{PluginID: testPlugin, Type: csi.PluginTypeNode, Healthy: true, NodeInfo: &csi.NodeInfo{ID: "n", Capabilities: caps}}
	e.volume("v1")
	m := e.mounter()
	mustMount(t, m, mountReq("v1", "a1"))
	res, err := m.ExpandVolume(t.Context(), &mounter.ExpandRequest{Namespace: testNS, VolumeID: "v1", RequiredBytes: 2 << 30})
	if err != nil || !res.Mounted || res.Capacity != 0 {
		t.Fatalf("expand on a node plugin without EXPAND_VOLUME = %+v, %v; want mounted, no capacity", res, err)
	}
	if n := e.p.CallCount(csitest.MethodNodeExpandVolume); n != 0 {
		t.Errorf("%d NodeExpandVolume calls to a plugin that does not advertise it", n)
	}
}
