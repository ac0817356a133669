package statetest

import (
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s suite) batches(t *testing.T) {
	t.Run("AppliesInOrder", func(t *testing.T) {
		w := s.empty(t)
		// The claim needs the plugin that the fingerprint before it creates.
		res := w.must(t, state.Batch{Commands: []state.Command{
			state.UpsertAllocations{Allocations: []csi.Allocation{allocEBSController(), allocEBSNode("n1"), allocWeb(1, "n1")}},
			state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
				fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true),
				fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
			}},
			state.RegisterVolume{Volume: volume(nsDefault, "data", pluginEBS, fsSNW)},
			claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)),
		}})
		if !res.Changed || res.Claim != nil || res.Attachment != nil {
			t.Errorf("Result = %s, want Changed and no Claim or Attachment", toJSON(res))
		}
		for _, tb := range state.Tables() {
			if idx := w.index(t, tb); idx != w.idx {
				t.Errorf("Index(%s) = %d, want the batch's %d", tb, idx, w.idx)
			}
		}
		if c := w.volume(t, nsDefault, "data").WriteClaims["web-1"]; c == nil || c.ExternalNodeID != "ext-n1" {
			t.Errorf("claim from the batch = %s", toJSON(c))
		}
	})

	t.Run("AllOrNothing", func(t *testing.T) {
		w := s.standard(t)
		w.refuse(t, state.Batch{Commands: []state.Command{
			state.RegisterVolume{Volume: volume(nsDefault, "new", pluginEBS, fsSNW)},
			claimCmd(nsDefault, "new", claim("web-1", "n1", csi.ClaimWrite, fsSNW)),
			claimCmd(nsDefault, "new", claim("web-2", "n2", csi.ClaimWrite, fsSNW)),
		}}, csi.ErrAttachedElsewhere, "new")
	})

	t.Run("SeesEarlierCommands", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.refuse(t, state.Batch{Commands: []state.Command{
			state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
				fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true),
				fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", false),
			}},
			claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimRead, fsMNMW)),
		}}, csi.ErrPluginUnhealthy)
		w.refuse(t, state.Batch{Commands: []state.Command{
			state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0},
			claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)),
		}}, csi.ErrAllocationTerminal)
	})

	t.Run("SameVolumeManyCommands", func(t *testing.T) {
		// Commands of one batch that change the same volumes, and read
		// them by ID and through their claims, leave what the same
		// commands leave one by one: volumes, claims, and every lookup
		// of the volume readers.
		cmds := []state.Command{
			claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)),
			claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimRead, fsMNMW)),
			state.SetPublishContext{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", PublishContext: map[string]string{"k": "1"}},
			claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)),
			state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0},
			state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", State: csi.ClaimNodeDetached},
			state.AttachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n2"},
			state.DetachVolume{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1"},
			state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimNodeDetached},
			state.DetachVolume{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"},
			state.RemoveAttachment{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"},
			state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"},
			state.RegisterVolume{Volume: volume(nsDefault, "brief", pluginEBS, fsSNW)},
			claimCmd(nsDefault, "brief", claim("web-3", "n1", csi.ClaimWrite, fsSNW)),
			state.DeregisterVolume{Namespace: nsDefault, VolumeID: "brief", Force: true},
		}
		one, batch := s.standard(t), s.standard(t)
		for _, c := range cmds {
			one.must(t, c)
		}
		batch.must(t, state.Batch{Commands: cmds})
		if a, b := readerView(t, one), readerView(t, batch); a != b {
			t.Errorf("after the batch:\n%s\nafter the same commands one by one:\n%s", b, a)
		}
	})

	t.Run("UpdateThenRemovePastClaim", func(t *testing.T) {
		// An update of a volume shares its claims with the version it
		// replaces; a later command of the same batch that removes one of
		// them must not change that version in place, or the lookups by
		// past claim would keep a volume that has none.
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		before := w.volume(t, nsDefault, "shared")
		update := volume(nsDefault, "shared", pluginEBS, fsMNMW, fsSNW)
		update.ExternalID = before.ExternalID
		w.must(t, state.Batch{Commands: []state.Command{
			state.RegisterVolume{Volume: update},
			state.RemoveClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"},
		}})
		if v := w.volume(t, nsDefault, "shared"); len(v.PastClaims) != 0 || len(v.Capabilities) != 2 {
			t.Errorf("volume after the batch = %s, want the update and no past claim", toJSON(v))
		}
		vols, err := w.s.VolumesWithPastClaims()
		if err != nil {
			t.Fatal(err)
		}
		stamps, err := w.s.PastClaimVolumeIDs()
		if err != nil {
			t.Fatal(err)
		}
		if len(vols) != 0 || len(stamps) != 0 {
			t.Errorf("VolumesWithPastClaims = %v, PastClaimVolumeIDs = %v; want neither to list the volume", volumeIDs(vols), stamps)
		}
		if vols, _ := w.s.VolumesByNode("n1"); len(vols) != 0 {
			t.Errorf("VolumesByNode(n1) = %v, want none: the only claim there is gone", volumeIDs(vols))
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		w := s.standard(t)
		inner := state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n3"}}}
		// Neither a nested batch nor a nil command need encode (the
		// encoder may refuse them), so they are applied directly: a
		// store reached without a log must refuse them too.
		for _, tc := range []struct {
			what string
			cmd  state.Batch
		}{
			{"a nested batch", state.Batch{Commands: []state.Command{inner}}},
			{"a nested *Batch", state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n3"}, &inner}}},
			{"a nil command", state.Batch{Commands: []state.Command{state.DeleteNode{NodeID: "n3"}, nil}}},
		} {
			before := w.dump(t)
			w.idx++
			if _, err := w.s.Apply(w.idx, tc.cmd); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Errorf("batch with %s: %v, want ErrInvalidRequest", tc.what, err)
			}
			if after := w.dump(t); after != before {
				t.Errorf("a refused batch with %s changed the store", tc.what)
			}
		}
	})

	t.Run("Empty", func(t *testing.T) {
		w := s.standard(t)
		w.noop(t, state.Batch{})
	})
}

// readerView is what the volume readers say of w's store, indexes
// aside (a batch writes at one index, the same commands at several).
func readerView(t *testing.T, w *world) string {
	t.Helper()
	strip := func(vols []*csi.Volume, err error) []*csi.Volume {
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			v.CreateIndex, v.ModifyIndex = 0, 0
			for node, a := range v.Attachments {
				a = a.Copy()
				a.CreateIndex, a.ModifyIndex = 0, 0
				v.Attachments[node] = a
			}
		}
		return vols
	}
	view := map[string][]*csi.Volume{
		"all":  strip(w.s.Volumes("", "")),
		"ebs":  strip(w.s.VolumesByPlugin(pluginEBS)),
		"n1":   strip(w.s.VolumesByNode("n1")),
		"n2":   strip(w.s.VolumesByNode("n2")),
		"past": strip(w.s.VolumesWithPastClaims()),
	}
	return toJSON(view)
}
