package csitest_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func createVolume(t *testing.T, c clients, name string, capacity int64) *csipb.Volume {
	t.Helper()
	resp, err := c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: capacity},
	})
	noErr(t, err)
	return resp.GetVolume()
}

func TestController_CreateVolume(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	req := &csipb.CreateVolumeRequest{
		Name: "db", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 5 << 20, LimitBytes: 10 << 20},
		Parameters:    map[string]string{"tier": "fast"},
	}
	resp, err := c.ctrl.CreateVolume(ctx, req)
	noErr(t, err)
	vol := resp.GetVolume()
	if vol.GetVolumeId() == "" || vol.GetCapacityBytes() != 5<<20 || vol.GetVolumeContext()["name"] != "db" {
		t.Fatalf("CreateVolume = %v", vol)
	}
	v, ok := p.Volume(vol.GetVolumeId())
	if !ok || v.Name != "db" || v.Capacity != 5<<20 || v.Parameters["tier"] != "fast" || v.InUse() {
		t.Errorf("model = %+v, %v", v, ok)
	}

	t.Run("repeat is idempotent", func(t *testing.T) {
		again, err := c.ctrl.CreateVolume(ctx, req)
		noErr(t, err)
		if again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
			t.Errorf("repeat created %q, want %q", again.GetVolume().GetVolumeId(), vol.GetVolumeId())
		}
		if n := len(p.Volumes()); n != 1 {
			t.Errorf("%d volumes, want 1", n)
		}
	})
	t.Run("same name other capacity", func(t *testing.T) {
		_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: "db", VolumeCapabilities: req.VolumeCapabilities,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 20 << 20}, Parameters: req.Parameters,
		})
		wantCode(t, err, codes.AlreadyExists)
	})
	t.Run("same name other parameters", func(t *testing.T) {
		_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name: "db", VolumeCapabilities: req.VolumeCapabilities, CapacityRange: req.CapacityRange,
			Parameters: map[string]string{"tier": "slow"},
		})
		wantCode(t, err, codes.AlreadyExists)
	})
	t.Run("default capacity", func(t *testing.T) {
		if got := createVolume(t, c, "default", 0).GetCapacityBytes(); got != csitest.DefaultVolumeCapacity {
			t.Errorf("capacity %d, want %d", got, csitest.DefaultVolumeCapacity)
		}
	})
}

func TestController_CreateVolume_Invalid(t *testing.T) {
	_, c := start(t, fullConfig)
	caps := []*csipb.VolumeCapability{mountCap(snw)}
	tests := []struct {
		name string
		req  *csipb.CreateVolumeRequest
		want codes.Code
	}{
		{"no name", &csipb.CreateVolumeRequest{VolumeCapabilities: caps}, codes.InvalidArgument},
		{"no capabilities", &csipb.CreateVolumeRequest{Name: "a"}, codes.InvalidArgument},
		{"no access type", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{
			{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: snw}}}}, codes.InvalidArgument},
		{"unknown access mode", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: []*csipb.VolumeCapability{
			mountCap(csipb.VolumeCapability_AccessMode_UNKNOWN)}}, codes.InvalidArgument},
		{"required above limit", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 10, LimitBytes: 5}}, codes.OutOfRange},
		{"more than available", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: csitest.DefaultAvailableCapacity + 1}}, codes.ResourceExhausted},
		{"missing source snapshot", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps,
			VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
				Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap-x"}}}}, codes.NotFound},
		{"missing source volume", &csipb.CreateVolumeRequest{Name: "a", VolumeCapabilities: caps,
			VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
				Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: "vol-x"}}}}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ctrl.CreateVolume(ctxT(t), tt.req)
			wantCode(t, err, tt.want)
		})
	}
}

func TestController_CreateVolume_Topology(t *testing.T) {
	zone := &csi.Topology{Segments: map[string]string{"zone": "a"}}
	_, c := start(t, csitest.Config{Controller: allController, RequiresTopologies: true, Topology: zone})
	ctx := ctxT(t)
	vol := createVolume(t, c, "local", 0)
	if got := vol.GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()["zone"] != "a" {
		t.Errorf("topology %v, want the node's zone", got)
	}
	resp, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "placed", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		AccessibilityRequirements: &csipb.TopologyRequirement{
			Requisite: []*csipb.Topology{{Segments: map[string]string{"zone": "b"}}, {Segments: map[string]string{"zone": "c"}}},
			Preferred: []*csipb.Topology{{Segments: map[string]string{"zone": "c"}}},
		},
	})
	noErr(t, err)
	if got := resp.GetVolume().GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()["zone"] != "c" {
		t.Errorf("topology %v, want the preferred zone c", got)
	}
}

func TestController_DeleteVolume(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	vol := createVolume(t, c, "gone", 0)
	for range 2 { // the second delete finds nothing and still succeeds
		_, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
		noErr(t, err)
	}
	if _, ok := p.Volume(vol.GetVolumeId()); ok {
		t.Error("volume still in the model")
	}
	_, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument)
	p.RequireNoViolations(t)
}

func TestController_ControllerPublishVolume(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 0).GetVolumeId()
	req := &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw)}
	resp, err := c.ctrl.ControllerPublishVolume(ctx, req)
	noErr(t, err)
	want := map[string]string{"devicePath": "/dev/fake-" + id}
	if !maps.Equal(resp.GetPublishContext(), want) {
		t.Errorf("publish context %v, want %v", resp.GetPublishContext(), want)
	}
	again, err := c.ctrl.ControllerPublishVolume(ctx, req)
	noErr(t, err)
	if !maps.Equal(again.GetPublishContext(), want) {
		t.Errorf("repeat publish context %v, want %v", again.GetPublishContext(), want)
	}
	v, _ := p.Volume(id)
	a := v.Attachments["node-1"]
	if got := v.AttachedNodes(); !slices.Equal(got, []string{"node-1"}) ||
		a.Capability != (csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}) ||
		a.MountOptions.FSType != "ext4" || !maps.Equal(a.PublishContext, want) {
		t.Errorf("attachments %+v", v.Attachments)
	}

	tests := []struct {
		name string
		req  *csipb.ControllerPublishVolumeRequest
		want codes.Code
	}{
		{"no volume ID", &csipb.ControllerPublishVolumeRequest{NodeId: "n", VolumeCapability: mountCap(snw)}, codes.InvalidArgument},
		{"no node ID", &csipb.ControllerPublishVolumeRequest{VolumeId: id, VolumeCapability: mountCap(snw)}, codes.InvalidArgument},
		{"no capability", &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n"}, codes.InvalidArgument},
		{"unknown volume", &csipb.ControllerPublishVolumeRequest{VolumeId: "nope", NodeId: "n", VolumeCapability: mountCap(snw)}, codes.NotFound},
		{"same node readonly", &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw), Readonly: true}, codes.AlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ctrl.ControllerPublishVolume(ctx, tt.req)
			wantCode(t, err, tt.want)
		})
	}
	p.RequireNoViolations(t)
}

func TestController_ControllerPublishVolume_MultiNode(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "shared", 0).GetVolumeId()
	for _, node := range []string{"n1", "n2", "n3"} {
		_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: mountCap(mnr), Readonly: true})
		noErr(t, err)
	}
	v, _ := p.Volume(id)
	if got := v.AttachedNodes(); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Errorf("attached to %v", got)
	}
	p.RequireNoViolations(t)
}

func TestController_ControllerPublishVolume_MaxVolumes(t *testing.T) {
	_, c := start(t, csitest.Config{Controller: allController, MaxVolumes: 1})
	ctx := ctxT(t)
	a, b := createVolume(t, c, "a", 0).GetVolumeId(), createVolume(t, c, "b", 0).GetVolumeId()
	_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: a, NodeId: "n", VolumeCapability: mountCap(snw)})
	noErr(t, err)
	_, err = c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: b, NodeId: "n", VolumeCapability: mountCap(snw)})
	wantCode(t, err, codes.ResourceExhausted)
}

func TestController_ControllerUnpublishVolume(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 0).GetVolumeId()
	for _, node := range []string{"n1", "n2"} {
		_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: mountCap(mnr)})
		noErr(t, err)
	}
	for range 2 {
		_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"})
		noErr(t, err)
	}
	if v, _ := p.Volume(id); !slices.Equal(v.AttachedNodes(), []string{"n2"}) {
		t.Errorf("attached to %v, want [n2]", v.AttachedNodes())
	}
	// An empty node ID detaches from every node.
	_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id})
	noErr(t, err)
	if v, _ := p.Volume(id); v.InUse() {
		t.Errorf("still attached to %v", v.AttachedNodes())
	}
	_, err = c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "unknown", NodeId: "n1"})
	noErr(t, err)
	_, err = c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{NodeId: "n1"})
	wantCode(t, err, codes.InvalidArgument)
	p.RequireNoViolations(t)
}

func TestController_ValidateVolumeCapabilities(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 0).GetVolumeId()
	p.AddVolume("registered", 1<<20, nil)
	tests := []struct {
		name      string
		id        string
		caps      []*csipb.VolumeCapability
		code      codes.Code
		confirmed bool
	}{
		{"created with it", id, []*csipb.VolumeCapability{mountCap(snw)}, codes.OK, true},
		{"other access type", id, []*csipb.VolumeCapability{blockCap(snw)}, codes.OK, false},
		{"other access mode", id, []*csipb.VolumeCapability{mountCap(mnr)}, codes.OK, false},
		{"pre-provisioned takes anything", "registered", []*csipb.VolumeCapability{blockCap(mnr)}, codes.OK, true},
		{"unknown volume", "nope", []*csipb.VolumeCapability{mountCap(snw)}, codes.NotFound, false},
		{"no capabilities", id, nil, codes.InvalidArgument, false},
		{"no volume ID", "", []*csipb.VolumeCapability{mountCap(snw)}, codes.InvalidArgument, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctrl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: tt.id, VolumeCapabilities: tt.caps})
			wantCode(t, err, tt.code)
			if got := resp.GetConfirmed() != nil; got != tt.confirmed {
				t.Errorf("confirmed = %v (%v), want %v", got, resp, tt.confirmed)
			}
		})
	}
}

func TestController_ListVolumes(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	for _, id := range []string{"c", "a", "b"} {
		p.AddVolume(id, 1, nil)
	}
	_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "b", NodeId: "n1", VolumeCapability: mountCap(snw)})
	noErr(t, err)

	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		noErr(t, err)
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetVolume().GetVolumeId())
			if e.GetVolume().GetVolumeId() == "b" && !slices.Equal(e.GetStatus().GetPublishedNodeIds(), []string{"n1"}) {
				t.Errorf("b published on %v, want [n1]", e.GetStatus().GetPublishedNodeIds())
			}
		}
		if token = resp.GetNextToken(); token == "" {
			if pages != 1 {
				t.Errorf("%d pages, want 2", pages+1)
			}
			break
		}
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("listed %v", ids)
	}
	_, err = c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: "bogus"})
	wantCode(t, err, codes.Aborted)
	_, err = c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument)
}

func TestController_GetCapacity(t *testing.T) {
	p, c := start(t, csitest.Config{Controller: allController, AvailableCapacity: 100 << 20})
	ctx := ctxT(t)
	createVolume(t, c, "v", 30<<20)
	resp, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	noErr(t, err)
	if resp.GetAvailableCapacity() != 70<<20 {
		t.Errorf("available %d, want %d", resp.GetAvailableCapacity(), 70<<20)
	}
	// Without Config.Pools, every volume of the model holds capacity,
	// a registered one too.
	p.AddVolume("registered", 20<<20, nil)
	resp, err = c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
	noErr(t, err)
	if resp.GetAvailableCapacity() != 50<<20 || resp.GetMaximumVolumeSize() != nil || resp.GetMinimumVolumeSize() != nil {
		t.Errorf("after AddVolume GetCapacity = %v, want 50 MiB available and no size bounds", resp)
	}
	if v, _ := p.Volume("registered"); v.Pool != -1 {
		t.Errorf("without Config.Pools the volume reports pool %d, want -1", v.Pool)
	}
}

func controllerCaps(t *testing.T, c clients) []csipb.ControllerServiceCapability_RPC_Type {
	t.Helper()
	resp, err := c.ctrl.ControllerGetCapabilities(ctxT(t), &csipb.ControllerGetCapabilitiesRequest{})
	noErr(t, err)
	var out []csipb.ControllerServiceCapability_RPC_Type
	for _, cc := range resp.GetCapabilities() {
		out = append(out, cc.GetRpc().GetType())
	}
	return out
}

func TestController_ControllerGetCapabilities(t *testing.T) {
	p, c := start(t, csitest.Config{Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, ExpandVolume: true}})
	want := []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	}
	if got := controllerCaps(t, c); !slices.Equal(got, want) {
		t.Errorf("caps %v, want %v", got, want)
	}
	_, full := start(t, fullConfig)
	if got := controllerCaps(t, full); len(got) != 14 {
		t.Errorf("full config advertises %d controller caps (%v), want 14", len(got), got)
	}
	p.SetCapabilities(csi.ControllerCapabilities{PublishUnpublishVolume: true}, csi.NodeCapabilities{})
	if got := controllerCaps(t, c); !slices.Equal(got, []csipb.ControllerServiceCapability_RPC_Type{csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}) {
		t.Errorf("after SetCapabilities caps %v", got)
	}
	_, err := c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	wantCode(t, err, codes.Unimplemented)
}

func TestController_Snapshots(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	src := createVolume(t, c, "src", 7<<20).GetVolumeId()
	other := createVolume(t, c, "other", 0).GetVolumeId()

	req := &csipb.CreateSnapshotRequest{SourceVolumeId: src, Name: "nightly"}
	snap, err := c.ctrl.CreateSnapshot(ctx, req)
	noErr(t, err)
	s := snap.GetSnapshot()
	if s.GetSnapshotId() == "" || s.GetSourceVolumeId() != src || s.GetSizeBytes() != 7<<20 || !s.GetReadyToUse() {
		t.Fatalf("CreateSnapshot = %v", s)
	}
	again, err := c.ctrl.CreateSnapshot(ctx, req)
	noErr(t, err)
	if again.GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Errorf("repeat made %q, want %q", again.GetSnapshot().GetSnapshotId(), s.GetSnapshotId())
	}
	_, err = c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: other, Name: "nightly"})
	wantCode(t, err, codes.AlreadyExists)
	_, err = c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: "nope", Name: "x"})
	wantCode(t, err, codes.NotFound)
	_, err = c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: src})
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: other, Name: "other"})
	noErr(t, err)

	list, err := c.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SourceVolumeId: src})
	noErr(t, err)
	if len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Errorf("ListSnapshots(source) = %v", list.GetEntries())
	}
	all, err := c.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
	noErr(t, err)
	if len(all.GetEntries()) != 2 {
		t.Errorf("ListSnapshots() has %d entries, want 2", len(all.GetEntries()))
	}
	got, err := c.ctrl.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: s.GetSnapshotId()})
	noErr(t, err)
	if got.GetSnapshot().GetSnapshotId() != s.GetSnapshotId() || got.GetSnapshot().GetSourceVolumeId() != src {
		t.Errorf("GetSnapshot = %v", got)
	}
	if st, ok := p.Snapshot(s.GetSnapshotId()); !ok || st.Name != "nightly" || st.SourceVolumeID != src {
		t.Errorf("model snapshot %+v, %v", st, ok)
	}

	// A volume made from the snapshot records its source.
	vol, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "restored", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: s.GetSnapshotId()}}},
	})
	noErr(t, err)
	if vol.GetVolume().GetContentSource().GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Errorf("content source %v", vol.GetVolume().GetContentSource())
	}

	for range 2 {
		_, err = c.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: s.GetSnapshotId()})
		noErr(t, err)
	}
	_, err = c.ctrl.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: s.GetSnapshotId()})
	wantCode(t, err, codes.NotFound)
}

func TestController_ControllerExpandVolume(t *testing.T) {
	p, c := start(t, csitest.Config{Controller: allController, Node: allNode, AvailableCapacity: 100 << 20})
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 10<<20).GetVolumeId()
	tests := []struct {
		name     string
		req      *csipb.ControllerExpandVolumeRequest
		code     codes.Code
		capacity int64
	}{
		{"grow", &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 20 << 20}}, codes.OK, 20 << 20},
		{"repeat", &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 20 << 20}}, codes.OK, 20 << 20},
		{"smaller keeps size", &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20}}, codes.OK, 20 << 20},
		{"limit below size", &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{LimitBytes: 1 << 20}}, codes.OutOfRange, 20 << 20},
		{"beyond the pool", &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 200 << 20}}, codes.OutOfRange, 20 << 20},
		{"unknown volume", &csipb.ControllerExpandVolumeRequest{VolumeId: "nope", CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}}, codes.NotFound, 20 << 20},
		{"no range", &csipb.ControllerExpandVolumeRequest{VolumeId: id}, codes.InvalidArgument, 20 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctrl.ControllerExpandVolume(ctx, tt.req)
			wantCode(t, err, tt.code)
			if err == nil && (resp.GetCapacityBytes() != tt.capacity || !resp.GetNodeExpansionRequired()) {
				t.Errorf("ControllerExpandVolume = %v, want capacity %d and node expansion", resp, tt.capacity)
			}
			if v, _ := p.Volume(id); v.Capacity != tt.capacity {
				t.Errorf("model capacity %d, want %d", v.Capacity, tt.capacity)
			}
		})
	}
}

func TestController_ControllerGetVolume(t *testing.T) {
	_, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 0).GetVolumeId()
	_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap(snw)})
	noErr(t, err)
	resp, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
	noErr(t, err)
	if resp.GetVolume().GetVolumeId() != id || !slices.Equal(resp.GetStatus().GetPublishedNodeIds(), []string{"n1"}) {
		t.Errorf("ControllerGetVolume = %v", resp)
	}
	_, err = c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: "nope"})
	wantCode(t, err, codes.NotFound)
}

func TestController_ControllerModifyVolume(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	id := createVolume(t, c, "v", 0).GetVolumeId()
	_, err := c.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"iops": "300"}})
	noErr(t, err)
	if v, _ := p.Volume(id); v.MutableParameters["iops"] != "300" {
		t.Errorf("mutable parameters %v", v.MutableParameters)
	}
	_, err = c.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: "nope", MutableParameters: map[string]string{"a": "b"}})
	wantCode(t, err, codes.NotFound)
}

// TestPlugin_NotAdvertised_Unimplemented: every RPC that needs a
// capability answers Unimplemented when it is not advertised.
func TestPlugin_NotAdvertised_Unimplemented(t *testing.T) {
	p, c := start(t, csitest.Config{})
	p.AddVolume("v", 1, nil)
	vc := mountCap(snw)
	calls := map[string]func(context.Context) error{
		csitest.MethodCreateVolume: func(ctx context.Context) error {
			_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{vc}})
			return err
		},
		csitest.MethodDeleteVolume: func(ctx context.Context) error {
			_, err := c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "v"})
			return err
		},
		csitest.MethodControllerPublishVolume: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "n", VolumeCapability: vc})
			return err
		},
		csitest.MethodControllerUnpublishVolume: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: "v", NodeId: "n"})
			return err
		},
		csitest.MethodListVolumes: func(ctx context.Context) error {
			_, err := c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
			return err
		},
		csitest.MethodGetCapacity: func(ctx context.Context) error {
			_, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
			return err
		},
		csitest.MethodCreateSnapshot: func(ctx context.Context) error {
			_, err := c.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{SourceVolumeId: "v", Name: "s"})
			return err
		},
		csitest.MethodDeleteSnapshot: func(ctx context.Context) error {
			_, err := c.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: "s"})
			return err
		},
		csitest.MethodListSnapshots: func(ctx context.Context) error {
			_, err := c.ctrl.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{})
			return err
		},
		csitest.MethodGetSnapshot: func(ctx context.Context) error {
			_, err := c.ctrl.GetSnapshot(ctx, &csipb.GetSnapshotRequest{SnapshotId: "s"})
			return err
		},
		csitest.MethodControllerExpandVolume: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "v", CapacityRange: &csipb.CapacityRange{RequiredBytes: 2}})
			return err
		},
		csitest.MethodControllerGetVolume: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: "v"})
			return err
		},
		csitest.MethodControllerModifyVolume: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerModifyVolume(ctx, &csipb.ControllerModifyVolumeRequest{VolumeId: "v", MutableParameters: map[string]string{"a": "b"}})
			return err
		},
		csitest.MethodControllerGetVolumeHealth: func(ctx context.Context) error {
			_, err := c.ctrl.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{})
			return err
		},
		csitest.MethodNodeStageVolume: func(ctx context.Context) error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/nonexistent", VolumeCapability: vc})
			return err
		},
		csitest.MethodNodeUnstageVolume: func(ctx context.Context) error {
			_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/nonexistent"})
			return err
		},
		csitest.MethodNodeGetVolumeStats: func(ctx context.Context) error {
			_, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: "/nonexistent"})
			return err
		},
		csitest.MethodNodeExpandVolume: func(ctx context.Context) error {
			_, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: "/nonexistent"})
			return err
		},
		csitest.MethodNodeGetVolumeHealth: func(ctx context.Context) error {
			_, err := c.node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{})
			return err
		},
	}
	for _, m := range slices.Sorted(maps.Keys(calls)) {
		t.Run(m, func(t *testing.T) {
			wantCode(t, calls[m](ctxT(t)), codes.Unimplemented)
			if got := p.CallsTo(m); len(got) != 1 || got[0].Code != codes.Unimplemented {
				t.Errorf("call log for %s = %v, want one Unimplemented call", m, got)
			}
		})
	}
	if v, _ := p.Volume("v"); v.InUse() || v.Capacity != 1 {
		t.Errorf("unimplemented calls changed the model: %+v", v)
	}
}
