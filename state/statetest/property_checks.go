package statetest

import (
	"fmt"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"pgregory.net/rapid"
)

// The invariants the property check verifies after every command, on
// each plugin and volume of the view (see machine.check).

func checkPlugin(rt *rapid.T, v view, p *csi.Plugin) {
	if len(p.Controllers)+len(p.Nodes) == 0 {
		rt.Errorf("plugin %s has no instance", p.ID)
	}
	var ch, nh, ce, ne int
	for node, in := range p.Controllers {
		ch += healthy(in)
		if n := v.Nodes[node]; toJSON(n.ControllerInstance(p.ID)) != toJSON(in) {
			rt.Errorf("plugin %s lists controller %s on node %s, the node reports %s", p.ID, toJSON(in), node, toJSON(n.ControllerInstance(p.ID)))
		}
	}
	for node, in := range p.Nodes {
		nh += healthy(in)
		if n := v.Nodes[node]; toJSON(n.NodeInstance(p.ID)) != toJSON(in) {
			rt.Errorf("plugin %s lists node instance %s on node %s, the node reports %s", p.ID, toJSON(in), node, toJSON(n.NodeInstance(p.ID)))
		}
	}
	for node, n := range v.Nodes {
		if n.ControllerInstance(p.ID) != nil && p.Controllers[node] == nil || n.NodeInstance(p.ID) != nil && p.Nodes[node] == nil {
			rt.Errorf("node %s reports an instance of plugin %s that the plugin does not list", node, p.ID)
		}
	}
	for _, a := range p.Allocations {
		if a.Type.HasController() {
			ce++
		}
		if a.Type.HasNode() {
			ne++
		}
		if al := v.Allocations[a.AllocationID]; al == nil || al.Terminal {
			rt.Errorf("plugin %s lists allocation %s, which is terminal or gone", p.ID, a.AllocationID)
		}
	}
	got := counts{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected}
	if want := (counts{ch, ce, nh, ne}); got != want {
		rt.Errorf("plugin %s counts %+v, its maps and allocations say %+v", p.ID, got, want)
	}
	if p.ModifyIndex > v.Indexes[state.TablePlugins] || p.CreateIndex > p.ModifyIndex {
		rt.Errorf("plugin %s: indexes %d/%d, table at %d", p.ID, p.CreateIndex, p.ModifyIndex, v.Indexes[state.TablePlugins])
	}
}

func healthy(p *csi.PluginInfo) int {
	if p.Healthy {
		return 1
	}
	return 0
}

func singleWriter(m csi.AccessMode) bool {
	return m == csi.AccessModeSingleNodeWriter || m == csi.AccessModeMultiNodeSingleWriter || m == csi.AccessModeSingleNodeSingleWriter
}

func checkVolume(rt *rapid.T, v view, vol *csi.Volume, p *csi.Plugin) {
	name := vol.Namespace + "/" + vol.ID
	seen := map[string]bool{}
	var live []*csi.Claim
	nodes := map[string]bool{}
	singleWriterMode, singleNodeMode, readOnlyMode := false, false, false
	for kind, claims := range map[string]map[string]*csi.Claim{"read": vol.ReadClaims, "write": vol.WriteClaims, "past": vol.PastClaims} {
		for id, c := range claims {
			if seen[id] {
				rt.Errorf("volume %s: allocation %s holds two claims", name, id)
			}
			seen[id] = true
			if c.AllocationID != id {
				rt.Errorf("volume %s: claim under %s is for allocation %s", name, id, c.AllocationID)
			}
			if kind == "past" {
				if c.State < csi.ClaimUnpublishing || c.State > csi.ClaimReadyToFree {
					rt.Errorf("volume %s: past claim of %s in state %s", name, id, c.State)
				}
				continue
			}
			if (c.Mode == csi.ClaimWrite) != (kind == "write") || c.State != csi.ClaimTaken {
				rt.Errorf("volume %s: %s claim of %s is %s in state %s", name, kind, id, c.Mode, c.State)
			}
			if a := v.Allocations[id]; a == nil || a.Terminal {
				rt.Errorf("volume %s: live claim of allocation %s, which is terminal or gone", name, id)
			}
			live = append(live, c)
			nodes[c.NodeID] = true
			singleWriterMode = singleWriterMode || singleWriter(c.AccessMode)
			singleNodeMode = singleNodeMode || c.AccessMode.SingleNode()
			readOnlyMode = readOnlyMode || c.AccessMode.ReadOnly()
		}
	}
	if singleWriterMode && len(vol.WriteClaims) > 1 {
		rt.Errorf("volume %s: %d writers under a single-writer mode: %s", name, len(vol.WriteClaims), toJSON(vol.WriteClaims))
	}
	if readOnlyMode && len(vol.WriteClaims) > 0 {
		rt.Errorf("volume %s: a writer under a read-only mode: %s", name, toJSON(vol.WriteClaims))
	}
	// The volume is on the nodes of its attachments (every live
	// claim's node has one; a past claim's keeps the volume there until
	// it is removed).
	for node := range vol.Attachments {
		nodes[node] = true
	}
	if singleNodeMode && len(nodes) > 1 {
		rt.Errorf("volume %s: live claims or attachments on %d nodes under a single-node mode: %s", name, len(nodes), toJSON(vol.Attachments))
	}
	checkAttachments(rt, vol, live)
	for _, c := range live {
		if c.AccessMode == csi.AccessModeSingleNodeSingleWriter && len(live) > 1 {
			rt.Errorf("volume %s: %d live claims under single-node-single-writer", name, len(live))
		}
	}
	want := fmt.Sprint(false, 0, 0, 0, 0)
	if p != nil {
		want = fmt.Sprint(p.Schedulable(), p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected)
	}
	if got := fmt.Sprint(vol.Schedulable, vol.ControllersHealthy, vol.ControllersExpected, vol.NodesHealthy, vol.NodesExpected); got != want {
		rt.Errorf("volume %s: plugin fields %s, the plugin says %s", name, got, want)
	}
	if vol.ModifyIndex > v.Indexes[state.TableVolumes] || vol.CreateIndex > vol.ModifyIndex {
		rt.Errorf("volume %s: indexes %d/%d, table at %d", name, vol.CreateIndex, vol.ModifyIndex, v.Indexes[state.TableVolumes])
	}
}

// checkAttachments checks a volume's attachment records against its
// claims: every live claim's node has an attachment, every attachment
// has a claim (live or past) on its node or is Detaching, and a
// Detaching attachment has no live claim on its node.
func checkAttachments(rt *rapid.T, vol *csi.Volume, live []*csi.Claim) {
	name := vol.Namespace + "/" + vol.ID
	liveOn := map[string][]string{}
	for _, c := range live {
		liveOn[c.NodeID] = append(liveOn[c.NodeID], c.AllocationID)
		if vol.Attachments[c.NodeID] == nil {
			rt.Errorf("volume %s: live claim of %s on node %s, which has no attachment: %s", name, c.AllocationID, c.NodeID, toJSON(vol.Attachments))
		}
	}
	for _, node := range slices.Sorted(maps.Keys(vol.Attachments)) {
		a := vol.Attachments[node]
		switch {
		case a == nil:
			rt.Errorf("volume %s: null attachment to node %s", name, node)
			continue
		case a.NodeID != node || !a.State.Valid() || a.ExternalNodeID == "":
			rt.Errorf("volume %s: attachment under node %s is %s", name, node, toJSON(a))
		case a.CreateIndex > a.ModifyIndex || a.ModifyIndex > vol.ModifyIndex:
			rt.Errorf("volume %s: attachment to node %s has indexes %d/%d, the volume's ModifyIndex is %d", name, node, a.CreateIndex, a.ModifyIndex, vol.ModifyIndex)
		case a.PublishContext != nil && len(a.PublishContext) == 0:
			rt.Errorf("volume %s: attachment to node %s has an empty, non-nil publish context", name, node)
		}
		if a.State == csi.AttachmentDetaching {
			if ids := liveOn[node]; len(ids) > 0 {
				rt.Errorf("volume %s: the attachment to node %s is detaching under the live claims of %v", name, node, ids)
			}
			continue
		}
		if len(claimsOn(vol, node, false)) == 0 {
			rt.Errorf("volume %s: the attachment to node %s is %s with no claim on the node", name, node, a.State)
		}
	}
}

// claimsOn returns the allocations holding a claim of v on node, live
// or past; with needed, only those that need the volume attached there
// (live, or past before the node step's checkpoint).
func claimsOn(v *csi.Volume, node string, needed bool) []string {
	var ids []string
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims} {
		for id, c := range m {
			if c.NodeID == node {
				ids = append(ids, id)
			}
		}
	}
	for id, c := range v.PastClaims {
		if c.NodeID == node && (!needed || c.State < csi.ClaimNodeDetached) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
