package csitest_test

import (
	"maps"
	"reflect"
	"slices"
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
		a.UnknownCapacity == b.UnknownCapacity && a.VolumeStatus == b.VolumeStatus &&
		slices.EqualFunc(a.Pools, b.Pools, func(x, y csitest.Pool) bool {
			return x.Topology.Equal(y.Topology) && maps.Equal(x.Parameters, y.Parameters) && x.Capacity == y.Capacity &&
				reflect.DeepEqual(x.MaxVolumeSize, y.MaxVolumeSize) && reflect.DeepEqual(x.MinVolumeSize, y.MinVolumeSize)
		})
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

	if creates {
		shapeCapacity(t, c, cfg, info.GetAccessibleTopology())
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
	shapeGetVolume(t, c, cfg, id, wantAttachments[id])
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

// shapeCapacity checks GetCapacity under cfg once one volume of
// DefaultVolumeCapacity exists: the room left, the bounds reported only
// where a pool sets them, and no room in a topology no pool reaches.
func shapeCapacity(t *testing.T, c clients, cfg csitest.Config, node *csipb.Topology) {
	t.Helper()
	ctx := ctxT(t)
	resp, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
	if !cfg.Controller.GetCapacity {
		wantCode(t, err, codes.Unimplemented)
		return
	}
	noErr(t, err)
	total, bounded := cfg.AvailableCapacity, false
	if total == 0 {
		total = csitest.DefaultAvailableCapacity
	}
	if len(cfg.Pools) > 0 {
		total = 0
		for _, pool := range cfg.Pools {
			total += pool.Capacity
			bounded = bounded || pool.MaxVolumeSize != nil
		}
	}
	if got, want := resp.GetAvailableCapacity(), total-csitest.DefaultVolumeCapacity; got != want {
		t.Errorf("GetCapacity available %d, want %d", got, want)
	}
	if got := resp.GetMaximumVolumeSize() != nil; got != bounded || resp.GetMinimumVolumeSize() != nil {
		t.Errorf("GetCapacity %v: maximum_volume_size reported %v, want %v, and no minimum", resp, got, bounded)
	}
	if node == nil {
		return
	}
	here, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{AccessibleTopology: node})
	noErr(t, err)
	if here.GetAvailableCapacity() != resp.GetAvailableCapacity() {
		t.Errorf("capacity from the node's topology %d, want all of it (%d)", here.GetAvailableCapacity(), resp.GetAvailableCapacity())
	}
	if len(cfg.Pools) > 0 {
		elsewhere := &csipb.Topology{Segments: map[string]string{"topology.csitest.csikit.io/zone": "zone-full"}}
		far, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{AccessibleTopology: elsewhere})
		noErr(t, err)
		if far.GetAvailableCapacity() != 0 {
			t.Errorf("capacity in the full zone %d, want 0", far.GetAvailableCapacity())
		}
		_, err = c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "far", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
			AccessibilityRequirements: &csipb.TopologyRequirement{Requisite: []*csipb.Topology{elsewhere}}})
		wantCode(t, err, codes.ResourceExhausted)
	}
}

// shapeGetVolume checks ControllerGetVolume under cfg: a status with the
// published nodes unless the shape leaves it out, and the legacy
// condition field only where the shape sends it.
func shapeGetVolume(t *testing.T, c clients, cfg csitest.Config, id string, published []string) {
	t.Helper()
	resp, err := c.ctrl.ControllerGetVolume(ctxT(t), &csipb.ControllerGetVolumeRequest{VolumeId: id})
	if !cfg.Type.HasController() || !cfg.Controller.GetVolume {
		wantCode(t, err, codes.Unimplemented)
		return
	}
	noErr(t, err)
	if resp.GetVolume().GetVolumeId() != id {
		t.Errorf("ControllerGetVolume(%s) reports volume %q", id, resp.GetVolume().GetVolumeId())
	}
	st := resp.GetStatus()
	if (st == nil) != (cfg.VolumeStatus == csitest.StatusAbsent) {
		t.Fatalf("status %v under %s", st, cfg.VolumeStatus)
	}
	if st == nil {
		return
	}
	if !slices.Equal(st.GetPublishedNodeIds(), published) {
		t.Errorf("published_node_ids %v, want %v", st.GetPublishedNodeIds(), published)
	}
	if hasCondition := len(st.ProtoReflect().GetUnknown()) > 0; hasCondition != (cfg.VolumeStatus == csitest.StatusWithCondition) {
		t.Errorf("legacy condition field present %v under %s", hasCondition, cfg.VolumeStatus)
	}
}
