package csitest_test

import (
	"maps"
	"slices"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func TestController_ControllerPublishVolume_PublishContextReply(t *testing.T) {
	tests := []struct {
		reply csitest.ContextReply
		// want is what the client sees; nil for no entries, the only
		// thing proto3 can carry for an empty or absent map.
		want func(id string) map[string]string
	}{
		{csitest.ContextSet, func(id string) map[string]string { return map[string]string{"devicePath": "/dev/fake-" + id} }},
		{csitest.ContextEmpty, func(string) map[string]string { return nil }},
		{csitest.ContextAbsent, func(string) map[string]string { return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.reply.String(), func(t *testing.T) {
			cfg := fullConfig
			cfg.PublishContext = tt.reply
			p, c := start(t, cfg)
			ctx := ctxT(t)
			id := createVolume(t, c, "v", 0).GetVolumeId()
			want := tt.want(id)
			req := &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: csitest.DefaultNodeID, VolumeCapability: mountCap(snw)}
			for _, round := range []string{"first", "repeat"} {
				resp, err := c.ctrl.ControllerPublishVolume(ctx, req)
				noErr(t, err)
				if got := resp.GetPublishContext(); !maps.Equal(got, want) || (want == nil) != (len(got) == 0) {
					t.Errorf("%s publish: publish context %v, want %v", round, got, want)
				}
			}
			// The attachment is recorded whatever the context.
			wantAttached := map[string][]string{id: {csitest.DefaultNodeID}}
			if got := p.Attachments(); !equalAttachments(got, wantAttached) {
				t.Errorf("Attachments() = %v, want %v", got, wantAttached)
			}
			v, _ := p.Volume(id)
			if a, ok := v.Attachments[csitest.DefaultNodeID]; !ok || !maps.Equal(a.PublishContext, want) {
				t.Errorf("model attachment %+v (recorded %v), want publish context %v", a, ok, want)
			}

			// Node calls that pass the context back are clean; one that
			// sends another is a mismatch, empty context or not.
			staging, target := paths(t)
			_, err := c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap(snw), PublishContext: want,
			})
			noErr(t, err)
			p.RequireNoViolations(t)
			_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
				VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap(snw),
				PublishContext: map[string]string{"other": "context"},
			})
			noErr(t, err)
			wantRules(t, p, csitest.RulePublishContextMismatch)
		})
	}
}

// With an empty or absent publish context the checker still knows a
// node call that came before ControllerPublishVolume: "published" is the
// attachment, never a context.
func TestChecker_MissingControllerPublish_EmptyPublishContext(t *testing.T) {
	for _, reply := range []csitest.ContextReply{csitest.ContextEmpty, csitest.ContextAbsent} {
		t.Run(reply.String(), func(t *testing.T) {
			cfg := fullConfig
			cfg.PublishContext = reply
			p, c := start(t, cfg)
			id := createVolume(t, c, "v", 0).GetVolumeId()
			staging, _ := paths(t)
			_, err := c.node.NodeStageVolume(ctxT(t), &csipb.NodeStageVolumeRequest{
				VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap(snw),
			})
			noErr(t, err)
			wantRules(t, p, csitest.RuleMissingControllerPublish)
		})
	}
}

func TestController_CreateVolume_Replies(t *testing.T) {
	const capacity = 5 << 20
	tests := []struct {
		name            string
		volumeContext   csitest.ContextReply
		unknownCapacity bool
		wantContext     map[string]string // as the client sees it
		wantModel       map[string]string // as the model holds it
		wantCapacity    int64
	}{
		{"context set", csitest.ContextSet, false, map[string]string{"name": "db"}, map[string]string{"name": "db"}, capacity},
		{"context empty", csitest.ContextEmpty, false, nil, map[string]string{}, capacity},
		{"context absent", csitest.ContextAbsent, false, nil, nil, capacity},
		{"capacity unknown", csitest.ContextSet, true, map[string]string{"name": "db"}, map[string]string{"name": "db"}, 0},
		{"context absent capacity unknown", csitest.ContextAbsent, true, nil, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fullConfig
			cfg.VolumeContext, cfg.UnknownCapacity = tt.volumeContext, tt.unknownCapacity
			p, c := start(t, cfg)
			ctx := ctxT(t)
			req := &csipb.CreateVolumeRequest{
				Name: "db", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
				CapacityRange: &csipb.CapacityRange{RequiredBytes: capacity},
			}
			check := func(what string, vol *csipb.Volume) {
				t.Helper()
				if got := vol.GetVolumeContext(); !maps.Equal(got, tt.wantContext) || (tt.wantContext == nil) != (len(got) == 0) {
					t.Errorf("%s: volume context %v, want %v", what, got, tt.wantContext)
				}
				if got := vol.GetCapacityBytes(); got != tt.wantCapacity {
					t.Errorf("%s: capacity_bytes %d, want %d", what, got, tt.wantCapacity)
				}
			}
			resp, err := c.ctrl.CreateVolume(ctx, req)
			noErr(t, err)
			check("CreateVolume", resp.GetVolume())
			again, err := c.ctrl.CreateVolume(ctx, req)
			noErr(t, err)
			check("repeated CreateVolume", again.GetVolume())
			id := resp.GetVolume().GetVolumeId()
			list, err := c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
			noErr(t, err)
			if len(list.GetEntries()) != 1 {
				t.Fatalf("ListVolumes = %v, want one entry", list)
			}
			check("ListVolumes", list.GetEntries()[0].GetVolume())
			got, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
			noErr(t, err)
			check("ControllerGetVolume", got.GetVolume())

			// The model keeps what was provisioned and the context as the
			// plugin chose it, nil and empty apart.
			v, _ := p.Volume(id)
			if v.Capacity != capacity || !maps.Equal(v.Context, tt.wantModel) || (v.Context == nil) != (tt.wantModel == nil) {
				t.Errorf("model capacity %d context %#v, want %d and %#v", v.Capacity, v.Context, int64(capacity), tt.wantModel)
			}
			gc, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
			noErr(t, err)
			if want := csitest.DefaultAvailableCapacity - capacity; gc.GetAvailableCapacity() != want {
				t.Errorf("GetCapacity %d, want %d: an unknown capacity is still drawn from the pool", gc.GetAvailableCapacity(), want)
			}
			// Expansion replies must carry the capacity, unknown or not.
			exp, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{
				VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 * capacity},
			})
			noErr(t, err)
			if exp.GetCapacityBytes() != 2*capacity {
				t.Errorf("ControllerExpandVolume capacity_bytes %d, want %d", exp.GetCapacityBytes(), 2*capacity)
			}
		})
	}
}

// accessible_topology none or set, NodeGetInfo's matching it.
func TestController_CreateVolume_TopologyReplies(t *testing.T) {
	rack := &csi.Topology{Segments: map[string]string{"zone": "z1", "rack": "r7"}}
	tests := []struct {
		name        string
		requires    bool
		topology    *csi.Topology
		wantVolume  map[string]string // nil: no accessible_topology
		wantNode    map[string]string // nil: no accessible_topology
		wantAdverts bool              // VOLUME_ACCESSIBILITY_CONSTRAINTS
	}{
		{"none", false, nil, nil, nil, false},
		{"node topology, no constraints", false, rack, nil, rack.Segments, false},
		{"constraints without a node topology", true, nil, nil, nil, true},
		{"set", true, rack, rack.Segments, rack.Segments, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fullConfig
			cfg.RequiresTopologies, cfg.Topology = tt.requires, tt.topology
			_, c := start(t, cfg)
			ctx := ctxT(t)
			vol := createVolume(t, c, "v", 0)
			switch got := vol.GetAccessibleTopology(); {
			case tt.wantVolume == nil && len(got) != 0:
				t.Errorf("volume accessible_topology %v, want none", got)
			case tt.wantVolume != nil && (len(got) != 1 || !maps.Equal(got[0].GetSegments(), tt.wantVolume)):
				t.Errorf("volume accessible_topology %v, want %v", got, tt.wantVolume)
			}
			info, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
			noErr(t, err)
			if got := info.GetAccessibleTopology(); (tt.wantNode == nil) != (got == nil) || !maps.Equal(got.GetSegments(), tt.wantNode) {
				t.Errorf("NodeGetInfo accessible_topology %v, want %v", got, tt.wantNode)
			}
			caps, err := c.id.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
			noErr(t, err)
			adverts := slices.ContainsFunc(caps.GetCapabilities(), func(pc *csipb.PluginCapability) bool {
				return pc.GetService().GetType() == csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS
			})
			if adverts != tt.wantAdverts {
				t.Errorf("VOLUME_ACCESSIBILITY_CONSTRAINTS advertised %v, want %v", adverts, tt.wantAdverts)
			}
		})
	}
}

func TestPlugin_Attachments(t *testing.T) {
	p, c := start(t, fullConfig)
	ctx := ctxT(t)
	if got := p.Attachments(); got == nil || len(got) != 0 {
		t.Fatalf("Attachments() = %#v, want an empty map", got)
	}
	a := createVolume(t, c, "a", 0).GetVolumeId()
	b := createVolume(t, c, "b", 0).GetVolumeId()
	createVolume(t, c, "never-published", 0)
	publish := func(id, node string) {
		t.Helper()
		_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: mountCap(mnr)})
		noErr(t, err)
	}
	publish(a, "node-2")
	publish(a, "node-1")
	publish(b, "node-3")
	want := map[string][]string{a: {"node-1", "node-2"}, b: {"node-3"}}
	got := p.Attachments()
	if !equalAttachments(got, want) {
		t.Fatalf("Attachments() = %v, want %v", got, want)
	}
	got[a][0] = "changed by the caller"
	if again := p.Attachments(); !equalAttachments(again, want) {
		t.Errorf("Attachments() after the caller changed its copy = %v", again)
	}
	_, err := c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: a, NodeId: "node-2"})
	noErr(t, err)
	_, err = c.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: b, NodeId: "node-3"})
	noErr(t, err)
	want = map[string][]string{a: {"node-1"}}
	if got := p.Attachments(); !equalAttachments(got, want) {
		t.Errorf("after unpublishing Attachments() = %v, want %v", got, want)
	}
	p.RequireNoViolations(t)
}

func equalAttachments(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, slices.Equal)
}

// wantRules fails unless the recorded violations are exactly rules, in
// order.
func wantRules(t *testing.T, p *csitest.Plugin, rules ...string) {
	t.Helper()
	var got []string
	for _, v := range p.Violations() {
		got = append(got, v.Rule)
	}
	if !slices.Equal(got, rules) {
		t.Errorf("violations %v, want rules %v", p.Violations(), rules)
	}
}
