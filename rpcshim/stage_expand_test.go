package rpcshim_test

import (
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// A node that stages the volume after an expansion runs the node step
// at stage time, in the mounter, and reports it: the server records the
// node done and CompleteNodeExpansions calls nothing more.
func TestMountVolume_NodeExpansionAtStage(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	_, err := c.expand(t, 4<<20)
	must(t, err)
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1})

	ctx := t.Context()
	_, err = c.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "web-2", Namespace: "default", NodeID: "n2"}}})
	must(t, err)
	r, err := c.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "data", Claim: csi.Claim{
		AllocationID: "web-2", NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode,
	}})
	must(t, err)
	req, err := mounter.NewMountRequest(r.Volume, r.Claim)
	must(t, err)
	expectEqual(t, req.NodeExpansion, &mounter.NodeExpansion{RequiredBytes: 4 << 20})
	mi, err := c.nodes["n2"].mounter.MountVolume(ctx, req)
	must(t, err)
	expectEqual(t, mi.NodeExpandedBytes, int64(4<<20))
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1, "n2": 1})

	must(t, c.server.NodeExpandedAtMount(ctx, &rpcshim.NodeExpandedRequest{
		Namespace: "default", VolumeID: "data", NodeID: "n2", RequiredBytes: 4 << 20, Capacity: mi.NodeExpandedBytes,
	}))
	expectEqual(t, c.stored(t).Expansion.DoneNodes, []string{"n1", "n2"})
	must(t, c.server.CompleteNodeExpansions(ctx, "n2"))
	expectEqual(t, c.nodeExpands(), map[string]int{"n1": 1, "n2": 1})

	// A node that has done the step gets no NodeExpansion in its next
	// mount request.
	req, err = mounter.NewMountRequest(c.stored(t), r.Claim)
	must(t, err)
	if req.NodeExpansion != nil {
		t.Errorf("a node that expanded gets %+v", req.NodeExpansion)
	}
	c.noViolations(t)
}

// A report for another range than the volume's expansion changes
// nothing; a bad node ID is refused.
func TestNodeExpandedAtMount_StaleReport(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	_, err := c.expand(t, 4<<20)
	must(t, err)
	must(t, c.server.NodeExpandedAtMount(t.Context(), &rpcshim.NodeExpandedRequest{
		Namespace: "default", VolumeID: "data", NodeID: "n2", RequiredBytes: 2 << 20, Capacity: 2 << 20,
	}))
	expectEqual(t, c.stored(t).Expansion.DoneNodes, []string{"n1"})
	// A node that has done the step reports it again: no write.
	before := c.stored(t).ModifyIndex
	must(t, c.server.NodeExpandedAtMount(t.Context(), &rpcshim.NodeExpandedRequest{
		Namespace: "default", VolumeID: "data", NodeID: "n1", RequiredBytes: 4 << 20, Capacity: 4 << 20,
	}))
	expectEqual(t, c.stored(t).ModifyIndex, before)
	if err := c.server.NodeExpandedAtMount(t.Context(), &rpcshim.NodeExpandedRequest{Namespace: "default", VolumeID: "data", NodeID: ""}); err == nil {
		t.Error("an empty node ID was accepted")
	}
}

// A node plugin without EXPAND_VOLUME is not asked at stage time.
func TestMountVolume_NoNodeExpandCapability(t *testing.T) {
	c := newXPCluster(t, xpConfig{controllerExpand: true})
	c.volume(t)
	_, err := c.expand(t, 4<<20)
	must(t, err)
	c.claimAndMount(t, "web-1", "n1")
	expectEqual(t, c.nodeExpands(), map[string]int{})
}

// A node's report while the controller step is still pending records
// nothing: the node step may only follow ControllerExpandVolume.
func TestNodeExpandedAtMount_ControllerStepPending(t *testing.T) {
	c := newXPCluster(t, bothExpand)
	c.volume(t)
	c.claimAndMount(t, "web-1", "n1")
	_, err := c.applier.Apply(t.Context(), state.RequestExpansion{
		Namespace: "default", VolumeID: "data", RequiredBytes: 4 << 20, Controller: true, RequestedAt: c.clock.Now(),
	})
	must(t, err)
	before := c.stored(t)
	must(t, c.server.NodeExpandedAtMount(t.Context(), &rpcshim.NodeExpandedRequest{
		Namespace: "default", VolumeID: "data", NodeID: "n1", RequiredBytes: 4 << 20, Capacity: 4 << 20,
	}))
	after := c.stored(t)
	expectEqual(t, after.ModifyIndex, before.ModifyIndex)
	expectEqual(t, len(after.Expansion.DoneNodes), 0)
}
