package csi_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/csikit/csikit/csi"
)

func topo(kv ...string) *csi.Topology {
	t := &csi.Topology{Segments: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Segments[kv[i]] = kv[i+1]
	}
	return t
}

func TestReachable(t *testing.T) {
	zoneA, zoneB := topo("zone", "a"), topo("zone", "b")
	for _, tc := range []struct {
		name string
		vol  []*csi.Topology
		node *csi.Topology
		want bool
	}{
		{"no volume topology, no node topology", nil, nil, true},
		{"no volume topology, zonal node", nil, zoneA, true},
		{"zonal volume, node of its zone", []*csi.Topology{zoneA}, topo("zone", "a", "rack", "r1"), true},
		{"zonal volume, node of the other zone", []*csi.Topology{zoneA}, zoneB, false},
		{"zonal volume, node without segments", []*csi.Topology{zoneA}, nil, false},
		{"zonal volume, node with empty segments", []*csi.Topology{zoneA}, topo(), false},
		{"two topologies, second matches", []*csi.Topology{zoneA, zoneB}, zoneB, true},
		{"two topologies, none matches", []*csi.Topology{zoneA, zoneB}, topo("zone", "c"), false},
		{"every segment must match", []*csi.Topology{topo("zone", "a", "rack", "r1")}, topo("zone", "a", "rack", "r2"), false},
		{"a missing segment does not match", []*csi.Topology{topo("zone", "a", "rack", "r1")}, zoneA, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, csi.Reachable(tc.vol, tc.node))
		})
	}
}

func TestCheckTopology_NamesBothSides(t *testing.T) {
	v := &csi.Volume{ID: "vol", Topologies: []*csi.Topology{topo("zone", "a"), topo("zone", "b", "rack", "r1")}}
	err := csi.CheckTopology(v, "node-3", topo("zone", "c"))
	require.ErrorIs(t, err, csi.ErrTopologyMismatch)
	require.Equal(t, csi.ClassFinal, csi.Classify(err))
	require.Contains(t, err.Error(), "{zone=a} or {rack=r1,zone=b}")
	require.Contains(t, err.Error(), "node node-3 is in {zone=c}")
	require.NoError(t, csi.CheckTopology(v, "node-1", topo("zone", "a")))
	require.ErrorIs(t, csi.CheckTopology(v, "node-4", nil), csi.ErrTopologyMismatch)
}

func TestReasons_TextRoundTrip(t *testing.T) {
	for _, r := range []csi.Reasons{0, csi.ReasonTopology, csi.ReasonTopology | csi.ReasonMaxVolumes, csi.ReasonNamespace | csi.ReasonDetaching} {
		b, err := r.MarshalText()
		require.NoError(t, err)
		var back csi.Reasons
		require.NoError(t, back.UnmarshalText(b))
		require.Equal(t, r, back, string(b))
	}
	require.Equal(t, "topology,max-volumes", (csi.ReasonTopology | csi.ReasonMaxVolumes).String())
	require.Equal(t, csi.ReasonTopology, (csi.ReasonTopology | csi.ReasonMaxVolumes).First())
	require.Same(t, csi.ErrTopologyMismatch, (csi.ReasonTopology | csi.ReasonMaxVolumes).Sentinel())
	require.Nil(t, csi.Reasons(0).Sentinel())
	var r csi.Reasons
	require.ErrorIs(t, r.UnmarshalText([]byte("topology,nope")), csi.ErrInvalidRequest)
	_, err := csi.Reasons(1 << 15).MarshalText()
	require.ErrorIs(t, err, csi.ErrInvalidRequest)
}

var (
	snw  = csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	mnmw = csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}
)

func healthyNode(id string, max int64, t *csi.Topology) *csi.PluginInfo {
	return &csi.PluginInfo{PluginID: "p", Type: csi.PluginTypeNode, Healthy: true,
		NodeInfo: &csi.NodeInfo{ID: "csi-" + id, MaxVolumes: max, AccessibleTopology: t}}
}

func schedulable() *csi.Plugin { return &csi.Plugin{ID: "p", NodesHealthy: 1} }

func TestPlacement_Node(t *testing.T) {
	zonal := func() *csi.Volume {
		return &csi.Volume{ID: "vol", Namespace: "default", PluginID: "p",
			Capabilities: []csi.Capability{snw, mnmw}, Topologies: []*csi.Topology{topo("zone", "a")}}
	}
	write := csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: snw}
	for _, tc := range []struct {
		name   string
		vol    func() *csi.Volume
		plugin *csi.Plugin
		req    csi.PlacementRequest
		facts  csi.NodeFacts
		want   csi.Reasons
	}{
		{"own zone", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, 0},
		{"other zone", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n2", Instance: healthyNode("n2", 0, topo("zone", "b"))}, csi.ReasonTopology},
		{"no node plugin", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n3"}, csi.ReasonNoNodePlugin},
		{"unhealthy node plugin", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n1", Instance: &csi.PluginInfo{NodeInfo: &csi.NodeInfo{ID: "x", AccessibleTopology: topo("zone", "a")}}},
			csi.ReasonNodePluginUnhealthy},
		{"plugin not schedulable", zonal, &csi.Plugin{ID: "p"}, write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonPluginNotSchedulable},
		{"plugin not registered", zonal, nil, write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonPluginNotSchedulable},
		{"other namespace", zonal, schedulable(), csi.PlacementRequest{Namespace: "prod", Mode: csi.ClaimWrite, Capability: snw},
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonNamespace},
		{"at max volumes", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 2, topo("zone", "a")), Attached: 2}, csi.ReasonMaxVolumes},
		{"under max volumes", zonal, schedulable(), write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 2, topo("zone", "a")), Attached: 1}, 0},
		{"at max volumes but already attached there", func() *csi.Volume {
			v := zonal()
			v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentAttached}}
			return v
		}, schedulable(), csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimRead, Capability: mnmw},
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 2, topo("zone", "a")), Attached: 2}, 0},
		{"single node mode held on another node", func() *csi.Volume {
			v := zonal()
			v.ReadClaims = map[string]*csi.Claim{"a1": {AllocationID: "a1", NodeID: "n9", Mode: csi.ClaimRead, AccessMode: snw.AccessMode, AttachmentMode: snw.AttachmentMode}}
			return v
		}, schedulable(), csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimRead, Capability: snw},
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonAttachedElsewhere},
		{"detaching from the node", func() *csi.Volume {
			v := zonal()
			v.Capabilities = []csi.Capability{mnmw}
			v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentDetaching}}
			return v
		}, schedulable(), csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: mnmw},
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonDetaching},
		{"creating", func() *csi.Volume { v := zonal(); v.Creating = true; return v }, schedulable(), write,
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonVolumeCreating},
		{"capability not allowed", zonal, schedulable(),
			csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: csi.Capability{AccessMode: csi.AccessModeMultiNodeSingleWriter, AttachmentMode: csi.AttachmentModeFileSystem}},
			csi.NodeFacts{NodeID: "n1", Instance: healthyNode("n1", 0, topo("zone", "a"))}, csi.ReasonModeNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := csi.NewPlacement(tc.vol(), tc.plugin, tc.req)
			require.Equal(t, tc.want.String(), p.Node(tc.facts).String())
		})
	}
}

// TestPlacement_AgreesWithClaim pins Placement to the claim rules: for
// any volume, request and node, Node is zero exactly when the claim
// checks (CheckClaim, the plugin's and the node's) pass, and otherwise
// the claim's error is one of the reasons' sentinels.
func TestPlacement_AgreesWithClaim(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	modes := []csi.AccessMode{
		csi.AccessModeSingleNodeWriter, csi.AccessModeSingleNodeReaderOnly, csi.AccessModeMultiNodeReaderOnly,
		csi.AccessModeMultiNodeSingleWriter, csi.AccessModeMultiNodeMultiWriter,
		csi.AccessModeSingleNodeSingleWriter, csi.AccessModeSingleNodeMultiWriter,
	}
	capOf := func(t *rapid.T, label string) csi.Capability {
		return csi.Capability{AccessMode: rapid.SampledFrom(modes).Draw(t, label+"-mode"),
			AttachmentMode: rapid.SampledFrom([]csi.AttachmentMode{csi.AttachmentModeFileSystem, csi.AttachmentModeBlockDevice}).Draw(t, label+"-attach")}
	}
	zones := []*csi.Topology{nil, topo("zone", "a"), topo("zone", "b")}
	rapid.Check(t, func(t *rapid.T) {
		v := &csi.Volume{ID: "vol", Namespace: "default", PluginID: "p", Creating: rapid.Float64().Draw(t, "creating") < 0.1}
		for i := range rapid.IntRange(1, 4).Draw(t, "caps") {
			v.Capabilities = append(v.Capabilities, capOf(t, fmt.Sprint("cap", i)))
		}
		if z := rapid.SampledFrom(zones).Draw(t, "vol-zone"); z != nil {
			v.Topologies = []*csi.Topology{z}
		}
		for i := range rapid.IntRange(0, 4).Draw(t, "claims") {
			c := &csi.Claim{AllocationID: fmt.Sprint("a", i), NodeID: rapid.SampledFrom(nodes).Draw(t, "claim-node"),
				Mode: rapid.SampledFrom([]csi.ClaimMode{csi.ClaimRead, csi.ClaimWrite}).Draw(t, "claim-mode"), State: csi.ClaimTaken}
			cp := v.Capabilities[rapid.IntRange(0, len(v.Capabilities)-1).Draw(t, "claim-cap")]
			c.AccessMode, c.AttachmentMode = cp.AccessMode, cp.AttachmentMode
			m := &v.ReadClaims
			if c.Mode == csi.ClaimWrite {
				m = &v.WriteClaims
			}
			if *m == nil {
				*m = map[string]*csi.Claim{}
			}
			(*m)[c.AllocationID] = c
			if v.Attachments == nil {
				v.Attachments = map[string]*csi.Attachment{}
			}
			v.Attachments[c.NodeID] = &csi.Attachment{NodeID: c.NodeID, State: csi.AttachmentAttached}
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "past-claims") {
			// A released claim: its node keeps an attachment until its
			// controller step is done.
			c := &csi.Claim{AllocationID: fmt.Sprint("old", i), NodeID: rapid.SampledFrom(nodes).Draw(t, "past-node"),
				Mode:  rapid.SampledFrom([]csi.ClaimMode{csi.ClaimRead, csi.ClaimWrite}).Draw(t, "past-mode"),
				State: rapid.SampledFrom([]csi.ClaimState{csi.ClaimUnpublishing, csi.ClaimNodeDetached, csi.ClaimControllerDetached}).Draw(t, "past-claim-state")}
			cp := v.Capabilities[rapid.IntRange(0, len(v.Capabilities)-1).Draw(t, "past-cap")]
			c.AccessMode, c.AttachmentMode = cp.AccessMode, cp.AttachmentMode
			if v.PastClaims == nil {
				v.PastClaims = map[string]*csi.Claim{}
			}
			v.PastClaims[c.AllocationID] = c
			if c.State < csi.ClaimControllerDetached && v.Attachments[c.NodeID] == nil {
				if v.Attachments == nil {
					v.Attachments = map[string]*csi.Attachment{}
				}
				v.Attachments[c.NodeID] = &csi.Attachment{NodeID: c.NodeID, State: csi.AttachmentAttached}
			}
		}
		for _, n := range nodes {
			if v.Attachments[n] == nil && rapid.Float64().Draw(t, "past-attach") < 0.3 {
				if v.Attachments == nil {
					v.Attachments = map[string]*csi.Attachment{}
				}
				st := rapid.SampledFrom([]csi.AttachmentState{csi.AttachmentAttached, csi.AttachmentDetaching}).Draw(t, "past-state")
				v.Attachments[n] = &csi.Attachment{NodeID: n, State: st}
			}
		}
		plugin := &csi.Plugin{ID: "p", NodesHealthy: rapid.IntRange(0, 1).Draw(t, "nodes-healthy")}
		req := csi.PlacementRequest{Namespace: rapid.SampledFrom([]string{"default", "prod"}).Draw(t, "ns"),
			Mode: rapid.SampledFrom([]csi.ClaimMode{csi.ClaimRead, csi.ClaimWrite}).Draw(t, "mode"), Capability: capOf(t, "req")}
		if rapid.Float64().Draw(t, "req-allowed") < 0.7 {
			// Mostly a capability the volume allows, so that the
			// checks past the capability's are reached.
			req.Capability = v.Capabilities[rapid.IntRange(0, len(v.Capabilities)-1).Draw(t, "req-cap")]
		}
		p := csi.NewPlacement(v, plugin, req)

		for _, n := range append(nodes, "n4") {
			f := csi.NodeFacts{NodeID: n, Attached: int64(rapid.IntRange(0, 3).Draw(t, "attached"))}
			if rapid.Float64().Draw(t, "has-instance") < 0.9 {
				f.Instance = healthyNode(n, int64(rapid.IntRange(0, 3).Draw(t, "max")), rapid.SampledFrom(zones).Draw(t, "node-zone"))
				f.Instance.Healthy = rapid.Float64().Draw(t, "healthy") < 0.9
			}
			got := p.Node(f)
			claim := &csi.Claim{AllocationID: "new", NodeID: n, Mode: req.Mode,
				AccessMode: req.Capability.AccessMode, AttachmentMode: req.Capability.AttachmentMode}
			claimErr := csi.CheckClaim(v, claim)
			want := claimRefusal(v, plugin, req, f, claimErr)
			if (got == 0) != (want == nil) {
				t.Fatalf("node %s: placement says %s, the claim checks say %v", n, got, want)
			}
			if claimErr != nil && !matchesOne(claimErr, got) {
				t.Fatalf("node %s: CheckClaim refused with %v, placement's reasons are %s", n, claimErr, got)
			}
			if got&(csi.ReasonModeNotAllowed|csi.ReasonClaimsTaken|csi.ReasonAttachedElsewhere|csi.ReasonDetaching|csi.ReasonReleasing) != 0 && claimErr == nil {
				t.Fatalf("node %s: placement says %s, CheckClaim allows the claim", n, got)
			}
		}
	})
}

// claimRefusal is the claim transaction's checks written out plainly,
// in its order.
func claimRefusal(v *csi.Volume, plugin *csi.Plugin, req csi.PlacementRequest, f csi.NodeFacts, claimErr error) error {
	switch {
	case req.Namespace != v.Namespace:
		return csi.ErrNamespaceMismatch
	case v.Creating:
		return csi.ErrVolumeInUse
	case !plugin.Schedulable():
		return csi.ErrPluginUnhealthy
	case f.Instance == nil:
		return csi.ErrPluginNotFound
	case !f.Instance.Healthy || f.Instance.NodeInfo.ID == "":
		return csi.ErrPluginUnhealthy
	case !csi.Reachable(v.Topologies, f.Instance.NodeInfo.AccessibleTopology):
		return csi.ErrTopologyMismatch
	case claimErr != nil:
		return claimErr
	case v.Attachments[f.NodeID] == nil && f.Instance.NodeInfo.MaxVolumes > 0 && f.Attached >= f.Instance.NodeInfo.MaxVolumes:
		return csi.ErrMaxVolumes
	}
	return nil
}

func matchesOne(err error, r csi.Reasons) bool {
	for bit := csi.Reasons(1); bit != 0; bit <<= 1 {
		if r&bit != 0 && errors.Is(err, bit.Sentinel()) {
			return true
		}
	}
	return false
}

func TestPlacement_NodeDoesNotAllocate(t *testing.T) {
	v := &csi.Volume{ID: "vol", Namespace: "default", PluginID: "p", Capabilities: []csi.Capability{snw},
		Topologies:  []*csi.Topology{topo("zone", "a")},
		Attachments: map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentAttached}}}
	p := csi.NewPlacement(v, schedulable(), csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: snw})
	f := csi.NodeFacts{NodeID: "n2", Instance: healthyNode("n2", 4, topo("zone", "b")), Attached: 1}
	var r csi.Reasons
	allocs := testing.AllocsPerRun(100, func() { r = p.Node(f) })
	require.Zero(t, allocs)
	require.Equal(t, csi.ReasonTopology|csi.ReasonAttachedElsewhere, r)
}
