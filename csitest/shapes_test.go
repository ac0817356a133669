package csitest_test

import (
	"maps"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// shapeBase is the monolith the shapes are written against: everything
// a shape may take away is there.
func shapeBase() csitest.Config {
	return csitest.Config{
		Type:       csi.PluginTypeMonolith,
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true, PublishReadonly: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	}
}

func TestShapes_Names(t *testing.T) {
	seen := make(map[string]bool)
	for _, s := range csitest.Shapes() {
		if s.Name == "" || s.Apply == nil || seen[s.Name] {
			t.Errorf("shape %q: empty, without Apply, or a repeated name", s.Name)
		}
		seen[s.Name] = true
		// A base with a node topology, so that "no-topology" has one to
		// take away.
		base := shapeBase()
		base.Topology = &csi.Topology{Segments: map[string]string{"zone": "a"}}
		cfg := base
		s.Apply(&cfg)
		if _, err := csitest.New(cfg); err != nil {
			t.Errorf("shape %q makes an invalid Config: %v", s.Name, err)
		}
		if s.Name != "default" && equalConfig(cfg, base) {
			t.Errorf("shape %q does not change the base", s.Name)
		}
	}
	if !seen["default"] {
		t.Error(`no "default" shape`)
	}
}

// Apply leaves the base's maps alone, so one base serves every shape.
func TestShapes_ApplyKeepsBase(t *testing.T) {
	zone := &csi.Topology{Segments: map[string]string{"zone": "a"}}
	base := shapeBase()
	base.Topology = zone
	for _, s := range csitest.Shapes() {
		cfg := base
		s.Apply(&cfg)
	}
	want := shapeBase()
	want.Topology = &csi.Topology{Segments: map[string]string{"zone": "a"}}
	if base.Topology != zone || !equalConfig(base, want) {
		t.Errorf("the shapes changed the base: %+v, topology %v", base, zone.Segments)
	}
}

// A correct CO's claim, mount and release over it leaves the model clean,
// the checker silent and the attachments as ControllerPublishVolume
// made them; the replies take the shape's form.
func TestShapes_Lifecycle(t *testing.T) {
	for _, s := range csitest.Shapes() {
		t.Run(s.Name, func(t *testing.T) {
			cfg := shapeBase()
			s.Apply(&cfg)
			p, c := start(t, cfg)
			shapeLifecycle(t, p, c, cfg)
		})
	}
}

func equalConfig(a, b csitest.Config) bool {
	return a.Type == b.Type && a.Controller == b.Controller && a.Node == b.Node &&
		a.RequiresTopologies == b.RequiresTopologies && a.Topology.Equal(b.Topology) &&
		a.PublishContext == b.PublishContext && a.VolumeContext == b.VolumeContext &&
		a.UnknownCapacity == b.UnknownCapacity
}

// shapeLifecycle is a correct CO over whatever cfg advertises: create
// (or AddVolume, without a controller that creates), ControllerPublish
// when advertised, stage when advertised, publish, and the release in
// reverse.
func shapeLifecycle(t *testing.T, p *csitest.Plugin, c clients, cfg csitest.Config) {
	t.Helper()
	ctx := ctxT(t)
	staging, target := paths(t)
	vc := mountCap(snw)
	hasController := cfg.Type.HasController()
	creates := hasController && cfg.Controller.CreateDeleteVolume
	attaches := hasController && cfg.Controller.PublishUnpublishVolume
	stages := cfg.Node.StageUnstageVolume

	caps, err := c.id.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
	noErr(t, err)
	var advertisesController, advertisesTopology bool
	for _, pc := range caps.GetCapabilities() {
		switch pc.GetService().GetType() {
		case csipb.PluginCapability_Service_CONTROLLER_SERVICE:
			advertisesController = true
		case csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			advertisesTopology = true
		}
	}
	if advertisesController != hasController || advertisesTopology != cfg.RequiresTopologies {
		t.Errorf("GetPluginCapabilities %v, want controller %v, constraints %v", caps, hasController, cfg.RequiresTopologies)
	}
	info, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	noErr(t, err)
	var wantNodeTopology map[string]string
	if cfg.Topology != nil {
		wantNodeTopology = cfg.Topology.Segments
	}
	if !maps.Equal(info.GetAccessibleTopology().GetSegments(), wantNodeTopology) {
		t.Errorf("NodeGetInfo topology %v, want %v", info.GetAccessibleTopology(), cfg.Topology)
	}

	var id string
	var volumeContext map[string]string
	if creates {
		resp, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "data", VolumeCapabilities: []*csipb.VolumeCapability{vc}})
		noErr(t, err)
		vol := resp.GetVolume()
		id, volumeContext = vol.GetVolumeId(), vol.GetVolumeContext()
		if wantEmpty := cfg.VolumeContext != csitest.ContextSet; wantEmpty != (len(volumeContext) == 0) {
			t.Errorf("volume context %v under %s", volumeContext, cfg.VolumeContext)
		}
		if wantZero := cfg.UnknownCapacity; wantZero != (vol.GetCapacityBytes() == 0) {
			t.Errorf("capacity_bytes %d with UnknownCapacity %v", vol.GetCapacityBytes(), cfg.UnknownCapacity)
		}
		if wantTopo := cfg.RequiresTopologies && cfg.Topology != nil; wantTopo != (len(vol.GetAccessibleTopology()) == 1) ||
			wantTopo && !maps.Equal(vol.GetAccessibleTopology()[0].GetSegments(), info.GetAccessibleTopology().GetSegments()) {
			t.Errorf("volume topology %v, node topology %v", vol.GetAccessibleTopology(), info.GetAccessibleTopology())
		}
	} else {
		id, volumeContext = "pre-provisioned", map[string]string{"share": "/exports/data"}
		p.AddVolume(id, 1<<30, volumeContext)
		_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "data", VolumeCapabilities: []*csipb.VolumeCapability{vc}})
		wantCode(t, err, codes.Unimplemented)
	}

	var publishContext map[string]string
	wantAttachments := map[string][]string{}
	if attaches {
		resp, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
			VolumeId: id, NodeId: info.GetNodeId(), VolumeCapability: vc, VolumeContext: volumeContext,
		})
		noErr(t, err)
		publishContext = resp.GetPublishContext()
		if wantEmpty := cfg.PublishContext != csitest.ContextSet; wantEmpty != (len(publishContext) == 0) {
			t.Errorf("publish context %v under %s", publishContext, cfg.PublishContext)
		}
		wantAttachments[id] = []string{info.GetNodeId()}
	} else {
		_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: info.GetNodeId(), VolumeCapability: vc})
		wantCode(t, err, codes.Unimplemented)
	}
	if got := p.Attachments(); !equalAttachments(got, wantAttachments) {
		t.Errorf("after the claim Attachments() = %v, want %v", got, wantAttachments)
	}

	stagingPath := ""
	if stages {
		stagingPath = staging
		_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
			VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc, PublishContext: publishContext, VolumeContext: volumeContext,
		})
		noErr(t, err)
	} else {
		_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: vc})
		wantCode(t, err, codes.Unimplemented)
	}
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: stagingPath, TargetPath: target, VolumeCapability: vc,
		PublishContext: publishContext, VolumeContext: volumeContext,
	})
	noErr(t, err)
	wantStaged := 0
	if stages {
		wantStaged = 1
	}
	v, _ := p.Volume(id)
	if len(v.Published) != 1 || len(v.Staged) != wantStaged {
		t.Errorf("mounted model: %d staged, %d published", len(v.Staged), len(v.Published))
	}

	_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	noErr(t, err)
	if stages {
		_, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		noErr(t, err)
	}
	if attaches {
		_, err = c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: info.GetNodeId()})
		noErr(t, err)
	}
	if got := p.Attachments(); len(got) != 0 {
		t.Errorf("after the release Attachments() = %v, want none", got)
	}
	if v, _ := p.Volume(id); v.InUse() {
		t.Errorf("after the release the volume is still in use: %+v", v)
	}
	if creates {
		_, err = c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
		noErr(t, err)
	}
	p.RequireNoViolations(t)
}
