package statetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"pgregory.net/rapid"
)

// The property test's small universe, so that random commands collide.
func propNamespaces() []string { return []string{nsDefault, nsOther} }
func propNodes() []string      { return []string{"n1", "n2", "n3"} }
func propPlugins() []string    { return []string{"pa", "pb"} }
func propAllocs() []string {
	return []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"}
}
func propVolumes() [][2]string {
	return [][2]string{{nsDefault, "v1"}, {nsDefault, "v2"}, {nsDefault, "v3"}, {nsOther, "v4"}}
}
func propTypes() []csi.PluginType {
	return []csi.PluginType{csi.PluginTypeController, csi.PluginTypeNode, csi.PluginTypeMonolith}
}
func propCaps() []csi.Capability {
	return []csi.Capability{
		capab(csi.AccessModeSingleNodeWriter, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeSingleNodeReaderOnly, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeMultiNodeReaderOnly, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeMultiNodeSingleWriter, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeMultiNodeMultiWriter, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeSingleNodeSingleWriter, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeSingleNodeMultiWriter, csi.AttachmentModeFileSystem),
		capab(csi.AccessModeSingleNodeWriter, csi.AttachmentModeBlockDevice),
		capab(csi.AccessModeMultiNodeMultiWriter, csi.AttachmentModeBlockDevice),
	}
}

// property applies random command sequences and checks the store's
// invariants after each command; a refused command must leave the store
// exactly as it was.
func (s suite) property(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &machine{w: s.empty(t), last: map[state.Table]uint64{}}
		m.seed(rt)
		// Weights: claims and their release steps come up more often
		// than the commands that tear the cluster down.
		gens := map[string]func(*rapid.T) state.Command{}
		for name, g := range map[string]struct {
			gen    func(*rapid.T) state.Command
			weight int
		}{
			"RegisterVolume":    {m.register, 2},
			"DeregisterVolume":  {m.deregister, 1},
			"UpsertNodePlugins": {m.fingerprint, 2},
			"DeleteNode":        {m.deleteNode, 1},
			"UpsertAllocations": {m.upsertAllocations, 3},
			"DeleteAllocations": {m.deleteAllocations, 1},
			"ClaimVolume":       {m.claim, 6},
			"ReleaseClaims":     {m.release, 2},
			"CheckpointClaim":   {m.checkpoint, 3},
			"FreeClaim":         {m.free, 2},
			"RemoveClaim":       {m.remove, 1},
			"SetPublishContext": {m.publish, 1},
			"AttachVolume":      {m.attach, 2},
			"DetachVolume":      {m.detach, 2},
			"RemoveAttachment":  {m.removeAttachment, 1},
			"RecordClaimError":  {m.recordError, 1},
		} {
			for i := range g.weight {
				gens[fmt.Sprintf("%s#%d", name, i)] = g.gen
			}
		}
		names := slices.Sorted(maps.Keys(gens))
		actions := map[string]func(*rapid.T){"": m.check}
		for name, gen := range gens {
			actions[name] = func(rt *rapid.T) { m.run(rt, gen(rt)) }
		}
		// A batch is all of its commands or none of them.
		actions["Batch"] = func(rt *rapid.T) {
			var b state.Batch
			for range rapid.IntRange(1, 3).Draw(rt, "batch size") {
				b.Commands = append(b.Commands, gens[rapid.SampledFrom(names).Draw(rt, "batched")](rt))
			}
			m.run(rt, b)
		}
		// The release worker's controller step for the last claims on a
		// node: the attachment's removal with the free, in one batch
		// (batches do not nest, so this is not among gens).
		for i := range 2 {
			actions[fmt.Sprintf("RemoveAttachmentAndFree#%d", i)] = func(rt *rapid.T) { m.run(rt, m.removeAndFree(rt)) }
		}
		rt.Repeat(actions)
	})
}

type machine struct {
	w    *world
	last map[state.Table]uint64
	// lastDump is the store as the last invariant check saw it.
	lastDump string
}

// seed starts a check from a random but working cluster, so that random
// commands find volumes to claim: every node runs a healthy monolith of
// each plugin, the allocations run, the volumes are registered.
func (m *machine) seed(rt *rapid.T) {
	for _, node := range propNodes() {
		var infos []csi.PluginInfo
		for _, p := range propPlugins() {
			info := fingerprint(p, csi.PluginTypeMonolith, node, "", true)
			info.NodeInfo.MaxVolumes = int64(rapid.IntRange(0, 3).Draw(rt, "max volumes"))
			infos = append(infos, info)
		}
		m.mustRun(rt, state.UpsertNodePlugins{NodeID: node, Plugins: infos})
	}
	var as []csi.Allocation
	for _, id := range propAllocs() {
		ns := nsDefault
		if rapid.IntRange(0, 4).Draw(rt, "other namespace") == 0 {
			ns = nsOther
		}
		as = append(as, alloc(id, ns, rapid.SampledFrom(propNodes()).Draw(rt, "node"), "job"))
	}
	m.mustRun(rt, state.UpsertAllocations{Allocations: as})
	for _, v := range propVolumes() {
		m.mustRun(rt, state.RegisterVolume{Volume: volume(v[0], v[1], rapid.SampledFrom(propPlugins()).Draw(rt, "plugin"),
			rapid.SliceOfNDistinct(rapid.SampledFrom(propCaps()), 1, 3, rapid.ID).Draw(rt, "capabilities")...)})
	}
	m.lastDump = m.w.dump(rt)
}

func (m *machine) mustRun(rt *rapid.T, cmd state.Command) {
	if _, err := m.w.apply(rt, cmd); err != nil {
		rt.Fatalf("seed %s: %v", cmd.Kind(), err)
	}
}

// run applies cmd; a refusal must match a csi sentinel and change
// nothing. A command of the attachment model (see expect) must also be
// refused or applied as the model says.
func (m *machine) run(rt *rapid.T, cmd state.Command) {
	before := m.lastDump // check ran after the previous command
	verify := m.expect(rt, cmd)
	res, err := m.w.apply(rt, cmd)
	if verify != nil {
		verify(res, err)
	}
	if err == nil {
		return
	}
	if csi.SentinelOf(err) == nil {
		rt.Errorf("%s refused with %q, which matches no csi sentinel", cmd.Kind(), err)
	}
	if after := m.w.dump(rt); after != before {
		rt.Errorf("refused %s (%v) changed the store:\nbefore: %s\nafter:  %s", cmd.Kind(), err, before, after)
	}
}

func drawVolume(rt *rapid.T) (ns, id string) {
	v := rapid.SampledFrom(propVolumes()).Draw(rt, "volume")
	return v[0], v[1]
}

func drawAlloc(rt *rapid.T) string { return rapid.SampledFrom(propAllocs()).Draw(rt, "allocation") }

// drawClaim picks, most of the time, an existing claim's volume and
// allocation, so that release steps find something to act on.
func (m *machine) drawClaim(rt *rapid.T) (ns, volID, allocID string) {
	ns, volID = drawVolume(rt)
	allocID = drawAlloc(rt)
	vols, err := m.w.s.Volumes("", "")
	if err != nil {
		rt.Fatalf("Volumes: %v", err)
	}
	var refs [][3]string
	for _, v := range vols {
		for _, c := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
			for _, id := range slices.Sorted(maps.Keys(c)) {
				refs = append(refs, [3]string{v.Namespace, v.ID, id})
			}
		}
	}
	if len(refs) > 0 && rapid.IntRange(0, 4).Draw(rt, "existing claim") > 0 {
		r := rapid.SampledFrom(refs).Draw(rt, "claim")
		return r[0], r[1], r[2]
	}
	return ns, volID, allocID
}

// drawReleasing is drawClaim, picking a past claim most of the time
// when there is one: the release steps act on those.
func (m *machine) drawReleasing(rt *rapid.T) (ns, volID, allocID string) {
	vols, err := m.w.s.VolumesWithPastClaims()
	if err != nil {
		rt.Fatalf("VolumesWithPastClaims: %v", err)
	}
	var refs [][3]string
	for _, v := range vols {
		for _, id := range slices.Sorted(maps.Keys(v.PastClaims)) {
			refs = append(refs, [3]string{v.Namespace, v.ID, id})
		}
	}
	if len(refs) > 0 && rapid.IntRange(0, 3).Draw(rt, "past claim") > 0 {
		r := rapid.SampledFrom(refs).Draw(rt, "past")
		return r[0], r[1], r[2]
	}
	return m.drawClaim(rt)
}

func (m *machine) register(rt *rapid.T) state.Command {
	ns, id := drawVolume(rt)
	v := volume(ns, id, rapid.SampledFrom(propPlugins()).Draw(rt, "plugin"),
		rapid.SliceOfNDistinct(rapid.SampledFrom(propCaps()), 1, 3, rapid.ID).Draw(rt, "capabilities")...)
	if rapid.IntRange(0, 4).Draw(rt, "other external ID") == 0 {
		v.ExternalID = "ext-elsewhere"
	}
	return state.RegisterVolume{Volume: v}
}

func (m *machine) deregister(rt *rapid.T) state.Command {
	ns, id := drawVolume(rt)
	return state.DeregisterVolume{Namespace: ns, VolumeID: id, Force: rapid.Bool().Draw(rt, "force")}
}

func (m *machine) fingerprint(rt *rapid.T) state.Command {
	node := rapid.SampledFrom(propNodes()).Draw(rt, "node")
	var infos []csi.PluginInfo
	for _, p := range propPlugins() {
		if !rapid.Bool().Draw(rt, "has "+p) {
			continue
		}
		alloc := rapid.SampledFrom(append([]string{""}, propAllocs()...)).Draw(rt, "allocation")
		info := fingerprint(p, rapid.SampledFrom(propTypes()).Draw(rt, "type"), node, alloc,
			rapid.IntRange(0, 3).Draw(rt, "health") > 0)
		info.RequiresController = rapid.Bool().Draw(rt, "requires controller")
		if info.NodeInfo != nil {
			info.NodeInfo.MaxVolumes = int64(rapid.IntRange(0, 2).Draw(rt, "max volumes"))
		}
		infos = append(infos, info)
	}
	return state.UpsertNodePlugins{NodeID: node, Plugins: infos}
}

func (m *machine) deleteNode(rt *rapid.T) state.Command {
	return state.DeleteNode{NodeID: rapid.SampledFrom(propNodes()).Draw(rt, "node")}
}

func (m *machine) upsertAllocations(rt *rapid.T) state.Command {
	n := rapid.IntRange(1, 2).Draw(rt, "count")
	var as []csi.Allocation
	for range n {
		a := alloc(drawAlloc(rt), rapid.SampledFrom(propNamespaces()).Draw(rt, "namespace"),
			rapid.SampledFrom(propNodes()).Draw(rt, "node"), rapid.SampledFrom([]string{"job-a", "job-b"}).Draw(rt, "job"))
		if old, err := m.w.s.Allocation(a.ID); err == nil && rapid.IntRange(0, 4).Draw(rt, "move") > 0 {
			a.Namespace, a.NodeID = old.Namespace, old.NodeID
		}
		if rapid.Bool().Draw(rt, "runs a plugin") {
			a.Plugins = []csi.AllocPlugin{{PluginID: rapid.SampledFrom(propPlugins()).Draw(rt, "plugin"), Type: rapid.SampledFrom(propTypes()).Draw(rt, "type")}}
		}
		a.Terminal = rapid.IntRange(0, 3).Draw(rt, "terminal") == 0
		as = append(as, a)
	}
	return state.UpsertAllocations{Allocations: as, ReleasedAt: t0.Add(time.Duration(m.w.idx) * time.Second)}
}

func (m *machine) deleteAllocations(rt *rapid.T) state.Command {
	return state.DeleteAllocations{AllocationIDs: []string{drawAlloc(rt)}}
}

func (m *machine) claim(rt *rapid.T) state.Command {
	ns, id := drawVolume(rt)
	allocID := drawAlloc(rt)
	// Mostly well-formed claims: the allocation's own node, a capability
	// the volume allows.
	node := rapid.SampledFrom(propNodes()).Draw(rt, "node")
	if a, err := m.w.s.Allocation(allocID); err == nil && rapid.IntRange(0, 4).Draw(rt, "right node") > 0 {
		node = a.NodeID
	}
	c := rapid.SampledFrom(propCaps()).Draw(rt, "capability")
	if v, err := m.w.s.Volume(ns, id); err == nil && rapid.IntRange(0, 4).Draw(rt, "allowed capability") > 0 {
		c = rapid.SampledFrom(v.Capabilities).Draw(rt, "volume capability")
	}
	mode := csi.ClaimRead
	if rapid.Bool().Draw(rt, "write") {
		mode = csi.ClaimWrite
	}
	return claimCmd(ns, id, claim(allocID, node, mode, c))
}

func (m *machine) release(rt *rapid.T) state.Command {
	_, _, allocID := m.drawClaim(rt)
	return state.ReleaseClaims{AllocationID: allocID, ReleasedAt: t0}
}

func (m *machine) checkpoint(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawReleasing(rt)
	st := csi.ClaimState(rapid.IntRange(-1, 5).Draw(rt, "state"))
	// Mostly forward, for a past claim, so that releases reach the
	// steps after the node's (detach, removal of the attachment, free).
	if v, err := m.w.s.Volume(ns, id); err == nil {
		if c := v.PastClaims[allocID]; c != nil && c.State < csi.ClaimReadyToFree && rapid.IntRange(0, 2).Draw(rt, "forward") > 0 {
			st = csi.ClaimState(rapid.IntRange(int(c.State)+1, int(csi.ClaimReadyToFree)).Draw(rt, "next state"))
		}
	}
	return state.CheckpointClaim{Namespace: ns, VolumeID: id, AllocationID: allocID, State: st}
}

func (m *machine) free(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawReleasing(rt)
	return state.FreeClaim{Namespace: ns, VolumeID: id, AllocationID: allocID}
}

func (m *machine) remove(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawClaim(rt)
	return state.RemoveClaim{Namespace: ns, VolumeID: id, AllocationID: allocID}
}

func (m *machine) publish(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawClaim(rt)
	pc := map[string]string{"lun": rapid.SampledFrom([]string{"1", "2"}).Draw(rt, "lun")}
	return state.SetPublishContext{Namespace: ns, VolumeID: id, AllocationID: allocID, PublishContext: pc}
}

// drawAttachment picks, most of the time, an existing attachment's
// volume and node, so that attachment commands find one to act on.
func (m *machine) drawAttachment(rt *rapid.T) (ns, volID, node string) {
	ns, volID = drawVolume(rt)
	node = rapid.SampledFrom(propNodes()).Draw(rt, "node")
	vols, err := m.w.s.Volumes("", "")
	if err != nil {
		rt.Fatalf("Volumes: %v", err)
	}
	var refs [][3]string
	for _, v := range vols {
		for _, n := range slices.Sorted(maps.Keys(v.Attachments)) {
			refs = append(refs, [3]string{v.Namespace, v.ID, n})
		}
	}
	if len(refs) > 0 && rapid.IntRange(0, 4).Draw(rt, "existing attachment") > 0 {
		r := rapid.SampledFrom(refs).Draw(rt, "attachment")
		return r[0], r[1], r[2]
	}
	return ns, volID, node
}

func (m *machine) attach(rt *rapid.T) state.Command {
	ns, id, node := m.drawAttachment(rt)
	// A plugin may answer with an empty publish context.
	pc := rapid.SampledFrom([]map[string]string{nil, {}, {"lun": "1"}, {"lun": "2"}}).Draw(rt, "publish context")
	return state.AttachVolume{Namespace: ns, VolumeID: id, NodeID: node, PublishContext: pc}
}

func (m *machine) detach(rt *rapid.T) state.Command {
	ns, id, node := m.drawAttachment(rt)
	return state.DetachVolume{Namespace: ns, VolumeID: id, NodeID: node}
}

func (m *machine) removeAttachment(rt *rapid.T) state.Command {
	ns, id, node := m.drawAttachment(rt)
	return state.RemoveAttachment{Namespace: ns, VolumeID: id, NodeID: node}
}

// removeAndFree is the release of the last claim on a node: the
// attachment there goes with the free.
func (m *machine) removeAndFree(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawReleasing(rt)
	node := rapid.SampledFrom(propNodes()).Draw(rt, "node")
	if v, err := m.w.s.Volume(ns, id); err == nil {
		if c := v.Claim(allocID); c != nil {
			node = c.NodeID
		}
	}
	return state.Batch{Commands: []state.Command{
		state.RemoveAttachment{Namespace: ns, VolumeID: id, NodeID: node},
		state.FreeClaim{Namespace: ns, VolumeID: id, AllocationID: allocID},
	}}
}

func (m *machine) recordError(rt *rapid.T) state.Command {
	ns, id, allocID := m.drawClaim(rt)
	return state.RecordClaimError{Namespace: ns, VolumeID: id, AllocationID: allocID, Error: "boom"}
}

// check verifies the invariants of the whole store.
func (m *machine) check(rt *rapid.T) {
	v := m.w.view(rt)
	b, err := json.Marshal(v)
	if err != nil {
		rt.Fatalf("encode view: %v", err)
	}
	m.lastDump = string(b)
	for tb, idx := range v.Indexes {
		if idx < m.last[tb] {
			rt.Errorf("Index(%s) went back from %d to %d", tb, m.last[tb], idx)
		}
		m.last[tb] = idx
	}
	plugins := map[string]*csi.Plugin{}
	for _, p := range v.Plugins {
		plugins[p.ID] = p
		checkPlugin(rt, v, p)
	}
	for id, n := range v.Nodes {
		for _, in := range n.Plugins {
			if in.Healthy && plugins[in.PluginID] == nil {
				rt.Errorf("node %s has a healthy instance of plugin %s, which does not exist", id, in.PluginID)
			}
			if a := v.Allocations[in.AllocationID]; a != nil && a.Terminal {
				rt.Errorf("node %s has an instance of plugin %s run by the terminal allocation %s", id, in.PluginID, a.ID)
			}
		}
	}
	for _, vol := range v.Volumes {
		checkVolume(rt, v, vol, plugins[vol.PluginID])
	}
	for id, a := range v.Allocations {
		if a.ModifyIndex > v.Indexes[state.TableAllocations] || a.CreateIndex > a.ModifyIndex {
			rt.Errorf("allocation %s: indexes %d/%d, table at %d", id, a.CreateIndex, a.ModifyIndex, v.Indexes[state.TableAllocations])
		}
	}
}
