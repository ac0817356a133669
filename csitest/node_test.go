package csitest_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func TestNode_StageAndPublish(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode, Node: allNode})
	ctx := ctxT(t)
	staging, target := paths(t)
	p.AddVolume("vol-1", 8<<20, map[string]string{"share": "exports/a"})
	vc := mountCap(snw)
	pc := map[string]string{"devicePath": "/dev/sdz"}
	vctx := map[string]string{"share": "exports/a"}

	stage := &csipb.NodeStageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging, VolumeCapability: vc, PublishContext: pc, VolumeContext: vctx}
	for range 2 { // the second is a no-op
		_, err := c.node.NodeStageVolume(ctx, stage)
		noErr(t, err)
	}
	if b, err := os.ReadFile(filepath.Join(staging, csitest.MarkerFile)); err != nil || string(b) != "vol-1" {
		t.Errorf("staging marker = %q, %v", b, err)
	}
	publish := &csipb.NodePublishVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: vc, PublishContext: pc, VolumeContext: vctx, Readonly: true}
	for range 2 {
		_, err := c.node.NodePublishVolume(ctx, publish)
		noErr(t, err)
	}
	if b, err := os.ReadFile(filepath.Join(target, csitest.MarkerFile)); err != nil || string(b) != "vol-1" {
		t.Errorf("target marker = %q, %v", b, err)
	}

	v, ok := p.Volume("vol-1")
	if !ok {
		t.Fatal("volume missing")
	}
	st, pub := v.Staged[staging], v.Published[target]
	if !maps.Equal(st.PublishContext, pc) || !maps.Equal(st.VolumeContext, vctx) || st.Capability.AttachmentMode != csi.AttachmentModeFileSystem {
		t.Errorf("staging %+v", st)
	}
	if !maps.Equal(pub.PublishContext, pc) || pub.StagingPath != staging || !pub.Readonly ||
		!slices.Equal(pub.MountOptions.MountFlags, []string{"noatime"}) {
		t.Errorf("publication %+v", pub)
	}

	stats, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target})
	noErr(t, err)
	if u := stats.GetUsage(); len(u) != 1 || u[0].GetTotal() != 8<<20 {
		t.Errorf("usage %v", u)
	}
	exp, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target, CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}})
	noErr(t, err)
	if exp.GetCapacityBytes() != 16<<20 {
		t.Errorf("expanded to %d", exp.GetCapacityBytes())
	}

	for range 2 {
		_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
		noErr(t, err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target still exists after unpublish: %v", err)
	}
	for range 2 {
		_, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging})
		noErr(t, err)
	}
	if _, err := os.Stat(filepath.Join(staging, csitest.MarkerFile)); !os.IsNotExist(err) {
		t.Errorf("staging marker still there: %v", err)
	}
	if _, err := os.Stat(staging); err != nil {
		t.Errorf("the CO's staging directory was removed: %v", err)
	}
	if v, _ := p.Volume("vol-1"); v.InUse() {
		t.Errorf("volume still in use: %+v", v)
	}
	p.RequireSequence(t, csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume, csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume)
	p.RequireNoViolations(t)
}

func TestNode_PublishBlock(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode})
	ctx := ctxT(t)
	_, target := paths(t)
	p.AddVolume("blk", 1, nil)
	req := &csipb.NodePublishVolumeRequest{VolumeId: "blk", TargetPath: target, VolumeCapability: blockCap(snw)}
	_, err := c.node.NodePublishVolume(ctx, req)
	noErr(t, err)
	if fi, err := os.Lstat(target); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("block target = %v, %v; want an empty file", fi, err)
	}
	if v, _ := p.Volume("blk"); v.Published[target].Capability.AttachmentMode != csi.AttachmentModeBlockDevice || v.Published[target].MountOptions != nil {
		t.Errorf("publication %+v", v.Published[target])
	}
	_, err = c.node.NodePublishVolume(ctx, req)
	noErr(t, err)
	_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "blk", TargetPath: target})
	noErr(t, err)
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("block target still exists: %v", err)
	}
	p.RequireNoViolations(t)
}

func TestNode_Errors(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode, Node: allNode})
	staging, target := paths(t)
	p.AddVolume("v", 1, nil)
	vc := mountCap(snw)
	ctx := ctxT(t)
	_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: vc})
	noErr(t, err)
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc})
	noErr(t, err)
	full := filepath.Join(filepath.Dir(target), "full")
	noErr(t, os.Mkdir(full, 0o750))
	noErr(t, os.WriteFile(filepath.Join(full, "keep"), nil, 0o600))

	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"stage without volume ID", func() error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{StagingTargetPath: staging, VolumeCapability: vc})
			return err
		}, codes.InvalidArgument},
		{"stage without path", func() error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument},
		{"stage without capability", func() error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"stage unknown volume", func() error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "nope", StagingTargetPath: staging, VolumeCapability: vc})
			return err
		}, codes.NotFound},
		{"restage with another capability", func() error {
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: blockCap(snw)})
			return err
		}, codes.AlreadyExists},
		{"publish without target", func() error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: vc})
			return err
		}, codes.InvalidArgument},
		{"publish unknown volume", func() error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "nope", StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc})
			return err
		}, codes.NotFound},
		{"republish readonly", func() error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc, Readonly: true})
			return err
		}, codes.AlreadyExists},
		{"republish other capability", func() error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap(mnr)})
			return err
		}, codes.AlreadyExists},
		{"publish into a non-empty directory", func() error {
			_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: full, VolumeCapability: vc})
			return err
		}, codes.FailedPrecondition},
		{"unpublish without target", func() error {
			_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"unpublish unknown volume", func() error {
			_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "nope", TargetPath: target})
			return err
		}, codes.OK},
		{"unstage unknown path", func() error {
			_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/elsewhere"})
			return err
		}, codes.OK},
		{"stats on an unused path", func() error {
			_, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: "/elsewhere"})
			return err
		}, codes.NotFound},
		{"stats on an unknown volume", func() error {
			_, err := c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "nope", VolumePath: target})
			return err
		}, codes.NotFound},
		{"expand unknown volume", func() error {
			_, err := c.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "nope", VolumePath: target})
			return err
		}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), tt.want)
		})
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || len(b) != 0 {
		t.Errorf("the fake touched a non-empty directory: %v", err)
	}
	p.RequireNoViolations(t)
}

func TestNode_SingleWriterSecondTarget(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode})
	ctx := ctxT(t)
	_, target := paths(t)
	p.AddVolume("v", 1, nil)
	_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap(ssw)})
	noErr(t, err)
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target + "-2", VolumeCapability: mountCap(ssw)})
	wantCode(t, err, codes.FailedPrecondition)
	if vs := p.Violations(); len(vs) != 1 || vs[0].Rule != csitest.RuleIncompatiblePublish {
		t.Errorf("violations %v", vs)
	}
}

func TestNode_AdmitUnknownVolumes(t *testing.T) {
	p, c := start(t, csitest.Config{Type: csi.PluginTypeNode, AdmitUnknownVolumes: true})
	_, target := paths(t)
	_, err := c.node.NodePublishVolume(ctxT(t), &csipb.NodePublishVolumeRequest{
		VolumeId: "from-elsewhere", TargetPath: target, VolumeCapability: mountCap(snw), VolumeContext: map[string]string{"k": "v"},
	})
	noErr(t, err)
	if v, ok := p.Volume("from-elsewhere"); !ok || v.Context["k"] != "v" || len(v.Published) != 1 {
		t.Errorf("admitted volume %+v, %v", v, ok)
	}
}

func TestNode_NodeGetInfo(t *testing.T) {
	zone := &csi.Topology{Segments: map[string]string{"zone": "a"}}
	p, c := start(t, csitest.Config{NodeID: "n-7", MaxVolumes: 3, Topology: zone})
	ctx := ctxT(t)
	info, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	if info.GetNodeId() != "n-7" || info.GetMaxVolumesPerNode() != 3 || info.GetAccessibleTopology().GetSegments()["zone"] != "a" {
		t.Errorf("NodeGetInfo = %v", info)
	}
	p.SetNodeInfo("n-8", 0, nil)
	info, err = c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	if info.GetNodeId() != "n-8" || info.GetMaxVolumesPerNode() != 0 || info.GetAccessibleTopology() != nil {
		t.Errorf("after SetNodeInfo NodeGetInfo = %v", info)
	}
}

func TestNode_NodeGetCapabilities(t *testing.T) {
	p, c := start(t, csitest.Config{Node: allNode})
	get := func() []csipb.NodeServiceCapability_RPC_Type {
		resp, err := c.node.NodeGetCapabilities(ctxT(t), &csipb.NodeGetCapabilitiesRequest{})
		noErr(t, err)
		var out []csipb.NodeServiceCapability_RPC_Type
		for _, nc := range resp.GetCapabilities() {
			out = append(out, nc.GetRpc().GetType())
		}
		return out
	}
	if got := get(); len(got) != 5 {
		t.Errorf("advertised %v, want 5 capabilities", got)
	}
	p.SetCapabilities(csi.ControllerCapabilities{}, csi.NodeCapabilities{StageUnstageVolume: true})
	if got := get(); !slices.Equal(got, []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}) {
		t.Errorf("after SetCapabilities %v", got)
	}
}
