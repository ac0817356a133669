package statetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func zone(z string, more ...string) *csi.Topology {
	t := &csi.Topology{Segments: map[string]string{"zone": z}}
	for i := 0; i+1 < len(more); i += 2 {
		t.Segments[more[i]] = more[i+1]
	}
	return t
}

// zonal is a world with plugin "ebs" on nodes n1 (zone a), n2 (zone
// b), n3 (no segments, MaxVolumes 1) and n4 (zone a, unhealthy), its
// controller on n1, one allocation of namespace default on each node
// (web-N on nN) and volumes: "a" (zone a), "ab" (zone a or b), "any"
// (no topology) and "full" (anywhere, attached to n3 by web-30).
func (s suite) zonal(t *testing.T) *world {
	t.Helper()
	w := s.empty(t)
	allocs := []csi.Allocation{allocEBSController(), alloc("web-30", nsDefault, "n3", "web")}
	for i := 1; i <= 4; i++ {
		allocs = append(allocs, allocEBSNode(fmt.Sprint("n", i)), allocWeb(i, fmt.Sprint("n", i)))
	}
	w.must(t, state.UpsertAllocations{Allocations: allocs, ReleasedAt: t0})
	node := func(n string, topo *csi.Topology, max int64, healthy bool) csi.PluginInfo {
		fp := fingerprint(pluginEBS, csi.PluginTypeNode, n, "ebs-node-"+n[1:], healthy)
		fp.NodeInfo.AccessibleTopology, fp.NodeInfo.MaxVolumes = topo, max
		return fp
	}
	w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
		fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true), node("n1", zone("a", "rack", "r1"), 0, true)}})
	w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{node("n2", zone("b"), 0, true)}})
	w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{node("n3", nil, 1, true)}})
	w.must(t, state.UpsertNodePlugins{NodeID: "n4", Plugins: []csi.PluginInfo{node("n4", zone("a"), 0, false)}})
	reg := func(id string, topos ...*csi.Topology) {
		v := volume(nsDefault, id, pluginEBS, fsSNW, fsMNMW)
		v.Topologies = topos
		w.must(t, state.RegisterVolume{Volume: v})
	}
	reg("a", zone("a"))
	reg("ab", zone("a"), zone("b"))
	reg("any")
	reg("full")
	w.must(t, claimCmd(nsDefault, "full", claim("web-30", "n3", csi.ClaimRead, fsMNMW)))
	return w
}

func (s suite) placement(t *testing.T) {
	write := func(alloc, node string) csi.Claim { return claim(alloc, node, csi.ClaimWrite, fsSNW) }

	t.Run("ClaimOfTheOtherZoneRefused", func(t *testing.T) {
		w := s.zonal(t)
		w.refuse(t, claimCmd(nsDefault, "a", write("web-2", "n2")), csi.ErrTopologyMismatch, "{zone=a}", "node n2 is in {zone=b}")
		w.must(t, claimCmd(nsDefault, "a", write("web-1", "n1")))
	})
	t.Run("VolumeWithTwoTopologies", func(t *testing.T) {
		w := s.zonal(t)
		w.refuse(t, claimCmd(nsDefault, "ab", write("web-3", "n3")), csi.ErrTopologyMismatch, "{zone=a} or {zone=b}", "{none}")
		w.must(t, claimCmd(nsDefault, "ab", write("web-2", "n2")))
	})
	t.Run("NodeWithoutSegments", func(t *testing.T) {
		w := s.zonal(t)
		w.refuse(t, claimCmd(nsDefault, "a", write("web-3", "n3")), csi.ErrTopologyMismatch)
		// A volume with no topology is reachable from any node, with
		// segments or without.
		w.must(t, claimCmd(nsDefault, "full", claim("web-3", "n3", csi.ClaimRead, fsMNMW)))
		w.must(t, claimCmd(nsDefault, "any", claim("web-2", "n2", csi.ClaimRead, fsMNMW)))
	})
	t.Run("FeasibilityNamesEachReason", func(t *testing.T) {
		w := s.zonal(t)
		got := s.feasible(t, w, "a", csi.ClaimWrite, fsSNW, nil)
		want := map[string]csi.Reasons{
			"n1": 0,
			"n2": csi.ReasonTopology,
			"n3": csi.ReasonTopology | csi.ReasonMaxVolumes,
			"n4": csi.ReasonNodePluginUnhealthy,
		}
		checkReasons(t, got, want)
		// Candidates the plugin does not run on, given in any order.
		got = s.feasible(t, w, "any", csi.ClaimRead, fsMNMW, []string{"n9", "n2", "n1"})
		checkReasons(t, got, map[string]csi.Reasons{"n1": 0, "n2": 0, "n9": csi.ReasonNoNodePlugin})
		if got[0].NodeID != "n1" || got[2].NodeID != "n9" {
			t.Errorf("feasibility is not sorted by node: %v", got)
		}
	})
	t.Run("MaxVolumesCountsDetachingAttachments", func(t *testing.T) {
		w := s.zonal(t)
		// web-30 stops: its attachment of "full" to n3 is detaching, and
		// still counts against n3's MaxVolumes of 1.
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(alloc("web-30", nsDefault, "n3", "web"))}, ReleasedAt: t0})
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "full", AllocationID: "web-30", State: csi.ClaimNodeDetached})
		w.must(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "full", NodeID: "n3"})
		checkReasons(t, s.feasible(t, w, "any", csi.ClaimRead, fsMNMW, []string{"n3"}),
			map[string]csi.Reasons{"n3": csi.ReasonMaxVolumes})
		w.refuse(t, claimCmd(nsDefault, "any", claim("web-3", "n3", csi.ClaimRead, fsMNMW)), csi.ErrMaxVolumes)
		// The volume being detached from n3 cannot be claimed there.
		checkReasons(t, s.feasible(t, w, "full", csi.ClaimRead, fsMNMW, []string{"n3"}),
			map[string]csi.Reasons{"n3": csi.ReasonDetaching})
	})
	t.Run("NodeThatLosesItsPlugin", func(t *testing.T) {
		w := s.zonal(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n2"})
		checkReasons(t, s.feasible(t, w, "ab", csi.ClaimWrite, fsSNW, []string{"n2"}),
			map[string]csi.Reasons{"n2": csi.ReasonNoNodePlugin})
		w.refuse(t, claimCmd(nsDefault, "ab", write("web-2", "n2")), csi.ErrPluginNotFound)
	})
	t.Run("UnknownVolume", func(t *testing.T) {
		w := s.zonal(t)
		_, err := w.s.Feasibility(&state.FeasibilityRequest{Namespace: nsDefault, VolumeID: "nope"}, nil)
		if !errors.Is(err, csi.ErrVolumeNotFound) {
			t.Errorf("feasibility of an unknown volume: %v, want ErrVolumeNotFound", err)
		}
		_, err = w.s.Feasibility(&state.FeasibilityRequest{Namespace: nsDefault, VolumeID: "a", Nodes: []string{"bad/id"}}, nil)
		if !errors.Is(err, csi.ErrInvalidID) {
			t.Errorf("feasibility with a malformed node ID: %v, want ErrInvalidID", err)
		}
	})
	t.Run("AgreesWithClaim", func(t *testing.T) {
		// For every volume, node and kind of claim of the zonal world,
		// with some claims already taken, feasibility is empty exactly
		// when ClaimVolume writes the claim.
		setup := func(t *testing.T) *world {
			w := s.zonal(t)
			w.must(t, claimCmd(nsDefault, "ab", write("web-1", "n1")))
			return w
		}
		w := setup(t)
		for _, vol := range []string{"a", "ab", "any", "full"} {
			for _, req := range []struct {
				mode csi.ClaimMode
				c    csi.Capability
			}{{csi.ClaimWrite, fsSNW}, {csi.ClaimRead, fsSNW}, {csi.ClaimRead, fsMNMW}, {csi.ClaimWrite, fsMNMW}} {
				for _, f := range s.feasible(t, w, vol, req.mode, req.c, nil) {
					n := f.NodeID
					fresh := setup(t)
					fresh.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{alloc("new", nsDefault, n, "web")}})
					_, err := fresh.apply(t, claimCmd(nsDefault, vol, claim("new", n, req.mode, req.c)))
					if (err == nil) != (f.Reasons == 0) {
						t.Errorf("volume %s, %s %s on %s: feasibility %s, claim error %v", vol, req.mode, req.c, n, f.Reasons, err)
					}
					if err != nil && !refusedFor(err, f.Reasons) {
						t.Errorf("volume %s on %s: claim refused with %v, feasibility's reasons are %s", vol, n, err, f.Reasons)
					}
				}
			}
		}
	})
}

func (s suite) feasible(t *testing.T, w *world, vol string, mode csi.ClaimMode, c csi.Capability, nodes []string) []state.NodeFeasibility {
	t.Helper()
	out, err := w.s.Feasibility(&state.FeasibilityRequest{Namespace: nsDefault, VolumeID: vol,
		Claim: csi.PlacementRequest{Namespace: nsDefault, Mode: mode, Capability: c}, Nodes: nodes}, nil)
	if err != nil {
		t.Fatalf("feasibility of %s: %v", vol, err)
	}
	return out
}

func checkReasons(t *testing.T, got []state.NodeFeasibility, want map[string]csi.Reasons) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("feasibility answered for %d nodes, want %d: %v", len(got), len(want), got)
	}
	for _, f := range got {
		if w, ok := want[f.NodeID]; !ok || w != f.Reasons {
			t.Errorf("node %s: reasons %s, want %s", f.NodeID, f.Reasons, w)
		}
	}
}

// refusedFor reports whether err is the sentinel of one of r's reasons.
func refusedFor(err error, r csi.Reasons) bool {
	for bit := csi.Reasons(1); bit != 0; bit <<= 1 {
		if s := bit.Sentinel(); r&bit != 0 && s != nil && errors.Is(err, s) {
			return true
		}
	}
	return false
}
