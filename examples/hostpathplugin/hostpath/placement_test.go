package hostpath_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

const gib int64 = 1 << 30

func TestParseTopology(t *testing.T) {
	long := strings.Repeat("x", 64)
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{"", nil, ""},
		{"zone=a", map[string]string{"zone": "a"}, ""},
		{"zone=a,rack=r1", map[string]string{"zone": "a", "rack": "r1"}, ""},
		{"topology.hostpath.csi/zone=a", map[string]string{"topology.hostpath.csi/zone": "a"}, ""},
		{"zone", nil, `topology segment "zone" is not key=value`},
		{"zone=a,", nil, `topology segment "" is not key=value`},
		{"=a", nil, `topology key "" has no name`},
		{"example.com/=a", nil, `topology key "example.com/" has no name`},
		{"zone=", nil, `topology key "zone" has an empty value`},
		{"zone=a=b", nil, `topology value "a=b" of key "zone" contains ',' or '='`},
		{"zone=a,zone=b", nil, `topology key "zone" appears twice`},
		{long + "=a", nil, "is too long"},
		{strings.Repeat("p", 254) + "/zone=a", nil, "is too long"},
		{"zone=" + long, nil, "is 64 bytes long, the spec allows 63"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := hostpath.ParseTopology(tc.in)
			if tc.err != "" {
				must.ErrorIs(t, err, hostpath.ErrInvalidConfig)
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Equal(t, tc.want, got)
		})
	}
}

func TestNew_InvalidPlacementConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  hostpath.Config
		want string
	}{
		{"NegativeCapacity", hostpath.Config{DataDir: "/x", Capacity: -1}, "Capacity is -1"},
		{"EmptyTopologyValue", hostpath.Config{DataDir: "/x", Topology: map[string]string{"zone": ""}}, `topology key "zone" has an empty value`},
		{"EmptyTopologyKey", hostpath.Config{DataDir: "/x", Topology: map[string]string{"": "a"}}, `topology key "" has no name`},
		{"CommaInKey", hostpath.Config{DataDir: "/x", Topology: map[string]string{"zone,rack": "a"}}, "contains ',' or '='"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hostpath.New(tc.cfg)
			must.ErrorIs(t, err, hostpath.ErrInvalidConfig)
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func topo(kv ...string) *csipb.Topology {
	t := &csipb.Topology{Segments: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Segments[kv[i]] = kv[i+1]
	}
	return t
}

func segments(ts []*csipb.Topology) []map[string]string {
	var out []map[string]string
	for _, t := range ts {
		out = append(out, t.GetSegments())
	}
	return out
}

// TestPlugin_Topology_Reported: with a Topology every mode advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS, and the node service reports the
// topology in NodeGetInfo.
func TestPlugin_Topology_Reported(t *testing.T) {
	rack := map[string]string{"zone": "a", "rack": "r1"}
	for _, tc := range []struct {
		name  string
		mode  hostpath.Mode
		split bool
	}{
		{"Monolith", hostpath.ModeMonolith, false},
		{"Controller", hostpath.ModeController, false},
		{"NodeOnly", hostpath.ModeNode, false},
		{"SplitNode", hostpath.ModeNode, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, hostpath.Config{Mode: tc.mode, SplitNode: tc.split, Topology: rack})
			ctx := context.Background()
			r, err := h.ident.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
			must.NoError(t, err)
			must.True(t, slices.ContainsFunc(r.GetCapabilities(), func(c *csipb.PluginCapability) bool {
				return c.GetService().GetType() == csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS
			}), "capabilities %v lack VOLUME_ACCESSIBILITY_CONSTRAINTS", r.GetCapabilities())
			info, err := h.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
			if tc.mode == hostpath.ModeController {
				requireCode(t, codes.Unimplemented, err)
				return
			}
			must.NoError(t, err)
			must.Equal(t, rack, info.GetAccessibleTopology().GetSegments())
		})
	}
	h := start(t, hostpath.Config{})
	info, err := h.node.NodeGetInfo(context.Background(), &csipb.NodeGetInfoRequest{})
	must.NoError(t, err)
	must.True(t, info.GetAccessibleTopology() == nil, "a plugin without Topology reports %v", info.GetAccessibleTopology())
}

// TestPlugin_CreateVolume_Topology: volumes are placed in the plugin's
// topology, and a request whose requisite topologies cannot reach it is
// refused with ResourceExhausted.
func TestPlugin_CreateVolume_Topology(t *testing.T) {
	rack := map[string]string{"zone": "a", "rack": "r1"}
	for _, tc := range []struct {
		name      string
		plugin    map[string]string
		requisite []*csipb.Topology
		preferred []*csipb.Topology
		want      codes.Code
	}{
		{name: "no requirements", plugin: rack},
		{name: "requisite is the plugin's", plugin: rack, requisite: []*csipb.Topology{topo("zone", "a", "rack", "r1")}},
		{name: "a node of the rack", plugin: rack, requisite: []*csipb.Topology{topo("zone", "a", "rack", "r1", "host", "h7")}},
		{name: "one requisite of two", plugin: rack, requisite: []*csipb.Topology{topo("zone", "b", "rack", "r1"), topo("zone", "a", "rack", "r1")},
			preferred: []*csipb.Topology{topo("zone", "b", "rack", "r1")}},
		{name: "preferred elsewhere, no requisite", plugin: rack, preferred: []*csipb.Topology{topo("zone", "b")}},
		{name: "another zone", plugin: rack, requisite: []*csipb.Topology{topo("zone", "b", "rack", "r1")}, want: codes.ResourceExhausted},
		{name: "all of zone a is wider than the rack", plugin: rack, requisite: []*csipb.Topology{topo("zone", "a")}, want: codes.ResourceExhausted},
		{name: "no plugin topology: reachable everywhere", requisite: []*csipb.Topology{topo("zone", "b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, hostpath.Config{Topology: tc.plugin})
			ctx := context.Background()
			req := &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
				AccessibilityRequirements: &csipb.TopologyRequirement{Requisite: tc.requisite, Preferred: tc.preferred}}
			resp, err := h.ctrl.CreateVolume(ctx, req)
			requireCode(t, tc.want, err)
			if err != nil {
				list, err := h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
				must.NoError(t, err)
				must.Len(t, list.GetEntries(), 0, "a refused CreateVolume left a volume")
				return
			}
			var want []map[string]string
			if tc.plugin != nil {
				want = []map[string]string{tc.plugin}
			}
			must.Equal(t, want, segments(resp.GetVolume().GetAccessibleTopology()), "CreateVolume's accessible_topology")
			got, err := h.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()})
			must.NoError(t, err)
			must.Equal(t, want, segments(got.GetVolume().GetAccessibleTopology()), "ControllerGetVolume's accessible_topology")
		})
	}
}

// TestPlugin_CreateVolume_TopologyKept: a volume keeps the topology it
// was created in across a restart, and a repeated CreateVolume whose
// requisite topologies no longer reach it is AlreadyExists.
func TestPlugin_CreateVolume_TopologyKept(t *testing.T) {
	h := start(t, hostpath.Config{Topology: map[string]string{"zone": "a"}})
	ctx := context.Background()
	req := &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		AccessibilityRequirements: &csipb.TopologyRequirement{Requisite: []*csipb.Topology{topo("zone", "a")}}}
	first, err := h.ctrl.CreateVolume(ctx, req)
	must.NoError(t, err)
	h.restart()
	list, err := h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	must.NoError(t, err)
	must.Len(t, list.GetEntries(), 1)
	must.Equal(t, []map[string]string{{"zone": "a"}}, segments(list.GetEntries()[0].GetVolume().GetAccessibleTopology()))
	again, err := h.ctrl.CreateVolume(ctx, req)
	must.NoError(t, err)
	must.Equal(t, first.GetVolume().GetVolumeId(), again.GetVolume().GetVolumeId())

	req.AccessibilityRequirements.Requisite = []*csipb.Topology{topo("zone", "b")}
	_, err = h.ctrl.CreateVolume(ctx, req)
	requireCode(t, codes.AlreadyExists, err)
}

func getCapacity(t *testing.T, h *harness, req *csipb.GetCapacityRequest) (available, largest int64) {
	t.Helper()
	resp, err := h.ctrl.GetCapacity(context.Background(), req)
	must.NoError(t, err)
	must.True(t, resp.GetMaximumVolumeSize() != nil, "no maximum_volume_size")
	must.True(t, resp.GetMinimumVolumeSize() == nil, "a minimum_volume_size %v", resp.GetMinimumVolumeSize())
	return resp.GetAvailableCapacity(), resp.GetMaximumVolumeSize().GetValue()
}

// TestPlugin_Capacity: with a Capacity the controller advertises
// GET_CAPACITY; CreateVolume and ControllerExpandVolume draw from it,
// DeleteVolume gives back, and a volume that does not fit is refused.
func TestPlugin_Capacity(t *testing.T) {
	h := start(t, hostpath.Config{Capacity: 10 * gib, Topology: map[string]string{"zone": "a"}})
	ctx := context.Background()
	caps, err := h.ctrl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	must.NoError(t, err)
	must.True(t, slices.ContainsFunc(caps.GetCapabilities(), func(c *csipb.ControllerServiceCapability) bool {
		return c.GetRpc().GetType() == csipb.ControllerServiceCapability_RPC_GET_CAPACITY
	}), "no GET_CAPACITY in %v", caps.GetCapabilities())

	create := func(name string, size int64) (string, error) {
		resp, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
			CapacityRange: &csipb.CapacityRange{RequiredBytes: size}})
		return resp.GetVolume().GetVolumeId(), err
	}
	all := &csipb.GetCapacityRequest{}
	avail, largest := getCapacity(t, h, all)
	must.Equal(t, 10*gib, avail)
	must.Equal(t, 10*gib, largest)

	first, err := create("first", 6*gib)
	must.NoError(t, err)
	avail, largest = getCapacity(t, h, all)
	must.Equal(t, 4*gib, avail)
	must.Equal(t, 4*gib, largest)

	_, err = create("second", 5*gib)
	requireCode(t, codes.ResourceExhausted, err)
	must.ErrorContains(t, err, "needs 5368709120 bytes and 4294967296 of the plugin's 10737418240 are free")
	_, err = h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: first, CapacityRange: &csipb.CapacityRange{RequiredBytes: 11 * gib}})
	requireCode(t, codes.OutOfRange, err)
	_, err = h.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: first, CapacityRange: &csipb.CapacityRange{RequiredBytes: 7 * gib}})
	must.NoError(t, err)
	avail, _ = getCapacity(t, h, all)
	must.Equal(t, 3*gib, avail)

	// The used capacity is read back from the state after a restart.
	h.restart()
	avail, _ = getCapacity(t, h, all)
	must.Equal(t, 3*gib, avail)

	_, err = h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: first})
	must.NoError(t, err)
	_, err = create("second", 5*gib)
	must.NoError(t, err)

	for _, tc := range []struct {
		name string
		req  *csipb.GetCapacityRequest
		want int64
	}{
		{"the plugin's zone", &csipb.GetCapacityRequest{AccessibleTopology: topo("zone", "a")}, 5 * gib},
		{"a rack of the zone", &csipb.GetCapacityRequest{AccessibleTopology: topo("zone", "a", "rack", "r3")}, 5 * gib},
		{"another zone", &csipb.GetCapacityRequest{AccessibleTopology: topo("zone", "b")}, 0},
		{"a mount capability", &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{mountCap(mnmw)}}, 5 * gib},
		{"a block capability", &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw), blockCap(snw)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			avail, largest := getCapacity(t, h, tc.req)
			must.Equal(t, tc.want, avail)
			must.Equal(t, tc.want, largest)
		})
	}
	_, err = h.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{VolumeCapabilities: []*csipb.VolumeCapability{{AccessType: mountCap(snw).AccessType}}})
	requireCode(t, codes.InvalidArgument, err)
}

func TestPlugin_Capacity_Unset(t *testing.T) {
	h := start(t, hostpath.Config{})
	ctx := context.Background()
	caps, err := h.ctrl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{})
	must.NoError(t, err)
	for _, c := range caps.GetCapabilities() {
		must.False(t, c.GetRpc().GetType() == csipb.ControllerServiceCapability_RPC_GET_CAPACITY, "GET_CAPACITY without a Capacity")
	}
	_, err = h.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{})
	requireCode(t, codes.Unimplemented, err)
	// Without a Capacity, any size is recorded.
	_, err = h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "huge", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 50}})
	must.NoError(t, err, "status %v", status.Convert(err))
}
