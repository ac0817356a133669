package statetest

import (
	"bytes"
	"context"
	"maps"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// scenario runs a bit of everything on a standard world, refused
// commands included, with timestamps that are not in UTC.
func (s suite) scenario(t *testing.T) *world {
	t.Helper()
	w := s.standard(t)
	local := time.Now().In(time.FixedZone("east", 5*3600+1800)) // carries a monotonic reading too
	w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
	w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
	w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimWrite, fsMNMW)))
	w.must(t, state.SetPublishContext{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", PublishContext: map[string]string{"lun": "3"}})
	w.must(t, state.AttachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n2", PublishContext: map[string]string{}})
	w.apply(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))   // refused
	w.apply(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n2"}) // refused: web-2 holds it
	w.apply(t, state.AttachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n3"}) // refused: not attached there
	late := fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true)
	late.UpdateTime = local
	w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{late}})
	w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1"))}, ReleasedAt: local})
	w.must(t, state.RecordClaimError{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", Error: "rpc error: unavailable"})
	w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimNodeDetached})
	w.apply(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimUnpublishing}) // refused
	w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimReadyToFree})
	w.apply(t, state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"}) // refused: still attached
	w.must(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"})
	w.must(t, state.Batch{Commands: []state.Command{
		state.RemoveAttachment{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"},
		state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"},
	}})
	// default/shared is left detaching from n1 (web-1's node step done)
	// and attached to n2, where web-2 is released below.
	w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", State: csi.ClaimNodeDetached})
	w.must(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1"})
	w.must(t, state.ReleaseClaims{AllocationID: "web-2", ReleasedAt: local.Add(time.Second)})
	w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocEBSNode("n2"))}, ReleasedAt: local})
	w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "empty-maps", pluginEBS, fsSNW)})
	ev := volume(nsDefault, "empty-maps-2", pluginEBS, fsSNW)
	ev.Parameters, ev.Context, ev.Secrets = map[string]string{}, map[string]string{}, csi.Secrets{}
	ev.MountOptions = &csi.MountOptions{FSType: "ext4", MountFlags: []string{}}
	w.must(t, state.RegisterVolume{Volume: ev})
	w.must(t, state.Batch{Commands: []state.Command{
		state.UpsertAllocations{Allocations: []csi.Allocation{allocWeb(6, "n1")}},
		claimCmd(nsDefault, "empty-maps", claim("web-6", "n1", csi.ClaimWrite, fsSNW)),
	}})
	w.must(t, state.DeleteNode{NodeID: "n3"})
	w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "solo"})
	return w
}

func (s suite) replay(t *testing.T) {
	w := s.scenario(t)
	r := s.empty(t)
	r.nodes, r.allocs = maps.Clone(w.nodes), maps.Clone(w.allocs)
	for _, e := range w.log {
		cmd, err := state.DecodeCommand(e.cmd)
		if err != nil {
			t.Fatalf("decode log entry %d: %v", e.index, err)
		}
		_, err = r.s.Apply(e.index, cmd)
		if (err == nil) != (e.err == nil) || csi.SentinelOf(err) != csi.SentinelOf(e.err) {
			t.Errorf("replay of %s at %d: error %v, the original got %v", cmd.Kind(), e.index, err, e.err)
		}
	}
	if a, b := w.dump(t), r.dump(t); a != b {
		t.Errorf("replayed store differs from the original:\noriginal: %s\nreplayed: %s", a, b)
	}
	ws, ok1 := w.s.(state.Snapshotter)
	rs, ok2 := r.s.(state.Snapshotter)
	if !ok1 || !ok2 {
		return
	}
	var a, b bytes.Buffer
	if err := ws.Snapshot(context.Background(), &a); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := rs.Snapshot(context.Background(), &b); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("snapshots of the original and the replayed store differ:\n%s\n%s", a.String(), b.String())
	}
}
