package statetest

import (
	"maps"
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s suite) claims(t *testing.T) {
	t.Run("Success", func(t *testing.T) {
		w := s.standard(t)
		res := w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		if !res.Changed {
			t.Errorf("Changed = false")
		}
		c := res.Claim
		if c == nil {
			t.Fatalf("Result.Claim = nil")
		}
		if c.ExternalNodeID != "ext-n1" || c.State != csi.ClaimTaken || c.AllocationID != "web-1" || c.NodeID != "n1" {
			t.Errorf("Result.Claim = %s, want web-1 on n1, taken, external node ext-n1", toJSON(c))
		}
		v := w.volume(t, nsDefault, "data")
		if got := v.WriteClaims["web-1"]; got == nil || got.ExternalNodeID != "ext-n1" || got.State != csi.ClaimTaken {
			t.Errorf("volume's write claims = %s", toJSON(v.WriteClaims))
		}
		if len(v.ReadClaims)+len(v.PastClaims) != 0 {
			t.Errorf("unexpected claims: %s", toJSON(v))
		}
		if v.ModifyIndex != w.idx || w.index(t, state.TableVolumes) != w.idx {
			t.Errorf("ModifyIndex %d, Index(volumes) %d, want %d", v.ModifyIndex, w.index(t, state.TableVolumes), w.idx)
		}
		c.NodeID = "changed"
		if got := w.volume(t, nsDefault, "data").WriteClaims["web-1"]; got.NodeID != "n1" {
			t.Errorf("changing Result.Claim changed the store")
		}
	})

	t.Run("CallerExternalNodeIDKept", func(t *testing.T) {
		w := s.standard(t)
		c := claim("web-1", "n1", csi.ClaimRead, fsMNMW)
		c.ExternalNodeID = "i-0abc"
		res := w.must(t, claimCmd(nsDefault, "shared", c))
		if res.Claim == nil || res.Claim.ExternalNodeID != "i-0abc" {
			t.Errorf("Result.Claim = %s, want ExternalNodeID i-0abc", toJSON(res.Claim))
		}
	})

	t.Run("RepeatIsIdempotent", func(t *testing.T) {
		w := s.standard(t)
		first := w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		res := w.noop(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		if res.Claim == nil || toJSON(res.Claim) != toJSON(first.Claim) {
			t.Errorf("repeat Result.Claim = %s, want %s", toJSON(res.Claim), toJSON(first.Claim))
		}
	})

	t.Run("Refused", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.must(t, claimCmd(nsDefault, "solo", claim("web-1", "n1", csi.ClaimWrite, fsSNSW)))
		badMode := claim("web-3", "n1", csi.ClaimMode(7), fsMNMW)
		for _, tc := range []struct {
			name    string
			cmd     state.ClaimVolume
			want    error
			mention []string
		}{
			{"MissingVolume", claimCmd(nsDefault, "missing", claim("web-1", "n1", csi.ClaimRead, fsSNW)), csi.ErrVolumeNotFound, []string{"missing"}},
			{"VolumeOfOtherNamespace", claimCmd(nsOther, "shared", claim("batch-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrVolumeNotFound, []string{"shared"}},
			{"BadVolumeID", claimCmd(nsDefault, "", claim("web-1", "n1", csi.ClaimRead, fsSNW)), csi.ErrInvalidID, nil},
			{"BadNamespace", claimCmd("a:b", "data", claim("web-1", "n1", csi.ClaimRead, fsSNW)), csi.ErrInvalidID, nil},
			{"BadAllocationID", claimCmd(nsDefault, "shared", claim("web 1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrInvalidID, nil},
			{"BadNodeID", claimCmd(nsDefault, "shared", claim("web-1", "", csi.ClaimRead, fsMNMW)), csi.ErrInvalidID, nil},
			{"BadMode", claimCmd(nsDefault, "shared", badMode), csi.ErrInvalidRequest, nil},
			{"UnknownAllocation", claimCmd(nsDefault, "shared", claim("ghost", "n1", csi.ClaimRead, fsMNMW)), csi.ErrAllocationNotFound, []string{"ghost"}},
			{"TerminalAllocation", claimCmd(nsDefault, "shared", claim("dead-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrAllocationTerminal, []string{"dead-1"}},
			{"NamespaceMismatch", claimCmd(nsDefault, "shared", claim("batch-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrNamespaceMismatch, []string{"batch-1", "shared"}},
			{"NodeMismatch", claimCmd(nsDefault, "shared", claim("web-2", "n1", csi.ClaimRead, fsMNMW)), csi.ErrInvalidRequest, []string{"web-2"}},
			{"ModeNotAllowed", claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimRead, blkSNW)), csi.ErrAccessModeNotAllowed, []string{"shared"}},
			{"WriteOnReadOnly", claimCmd(nsDefault, "logs", claim("web-3", "n1", csi.ClaimWrite, fsMNR)), csi.ErrAccessModeNotAllowed, []string{"logs"}},
			{"SecondWriter", claimCmd(nsDefault, "data", claim("web-3", "n1", csi.ClaimWrite, fsSNW)), csi.ErrMaxClaims, []string{"data"}},
			{"SingleWorkload", claimCmd(nsDefault, "solo", claim("web-3", "n1", csi.ClaimRead, fsSNSW)), csi.ErrMaxClaims, []string{"solo"}},
			{"AttachedElsewhere", claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimRead, fsSNW)), csi.ErrAttachedElsewhere, []string{"data"}},
			{"SameAllocationOtherMode", claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimRead, fsSNW)), csi.ErrInvalidRequest, []string{"web-1"}},
			{"NoNodePluginOnNode", claimCmd(nsDefault, "shared", claim("web-4", "n3", csi.ClaimRead, fsMNMW)), csi.ErrPluginNotFound, []string{"n3"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w.refuse(t, tc.cmd, tc.want, tc.mention...)
			})
		}
	})

	t.Run("PluginNotSchedulable", func(t *testing.T) {
		w := s.standard(t)
		// The only controller turns unhealthy.
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", false),
			fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
		}})
		if v := w.volume(t, nsDefault, "shared"); v.Schedulable || v.ControllersHealthy != 0 {
			t.Errorf("volume read: Schedulable %t ControllersHealthy %d, want false 0", v.Schedulable, v.ControllersHealthy)
		}
		w.refuse(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrPluginUnhealthy, pluginEBS)
	})

	t.Run("NodeInstanceUnhealthy", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", false),
		}})
		w.refuse(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimRead, fsMNMW)), csi.ErrPluginUnhealthy, "n2")
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
	})

	t.Run("PluginGone", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n1"})
		w.must(t, state.UpsertNodePlugins{NodeID: "n2"})
		w.refuse(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrPluginNotFound, pluginEBS)
	})

	t.Run("MaxVolumes", func(t *testing.T) {
		w := s.standard(t)
		node := fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true)
		node.NodeInfo.MaxVolumes = 1
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true), node,
		}})
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.refuse(t, claimCmd(nsDefault, "data", claim("web-3", "n1", csi.ClaimWrite, fsSNW)), csi.ErrMaxVolumes, "n1", "data")
		// Another claim of an attached volume attaches nothing new.
		w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimRead, fsMNMW)))
		// Volumes of other nodes do not count.
		w.must(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))
		w.must(t, state.ReleaseClaims{AllocationID: "web-2", ReleasedAt: t0})
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		w.must(t, state.ReleaseClaims{AllocationID: "web-3", ReleasedAt: t0})
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{allocWeb(5, "n1")}})
		// Released but not yet detached from the node: still counts.
		w.refuse(t, claimCmd(nsDefault, "logs", claim("web-5", "n1", csi.ClaimRead, fsMNR)), csi.ErrMaxVolumes, "n1")
		for _, a := range []string{"web-1", "web-3"} {
			w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: a, State: csi.ClaimNodeDetached})
		}
		// Node steps done, but the volume is attached until its
		// attachment record goes.
		w.refuse(t, claimCmd(nsDefault, "logs", claim("web-5", "n1", csi.ClaimRead, fsMNR)), csi.ErrMaxVolumes, "n1")
		w.must(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1"})
		w.refuse(t, claimCmd(nsDefault, "logs", claim("web-5", "n1", csi.ClaimRead, fsMNR)), csi.ErrMaxVolumes, "n1")
		w.must(t, state.RemoveAttachment{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1"})
		w.must(t, claimCmd(nsDefault, "logs", claim("web-5", "n1", csi.ClaimRead, fsMNR)))
	})

	t.Run("RemoveClaim", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.must(t, state.RemoveClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"})
		if v := w.volume(t, nsDefault, "data"); v.InUse() {
			t.Errorf("volume still claimed: %s", toJSON(v))
		}
		if vols, _ := w.s.VolumesByNode("n1"); len(vols) != 0 {
			t.Errorf("VolumesByNode(n1) = %v, want none", volumeIDs(vols))
		}
		w.refuse(t, state.RemoveClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"}, csi.ErrClaimNotFound, "web-1")
		// The allocation may claim again, from another node's allocation too.
		w.must(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))
	})

	t.Run("ManyReaders", func(t *testing.T) {
		w := s.standard(t)
		for i, node := range []string{"n1", "n2", "n1"} {
			w.must(t, claimCmd(nsDefault, "logs", claim([]string{"web-1", "web-2", "web-3"}[i], node, csi.ClaimRead, fsMNR)))
		}
		v := w.volume(t, nsDefault, "logs")
		if got := slices.Sorted(maps.Keys(v.ReadClaims)); !slices.Equal(got, []string{"web-1", "web-2", "web-3"}) {
			t.Errorf("read claims = %v", got)
		}
	})
}
