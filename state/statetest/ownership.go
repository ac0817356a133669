package statetest

import (
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// ownership checks the ownership rule of Store.Apply: a store keeps
// nothing a command points to, so a caller that changes a command's
// maps, slices and pointed-to structs after Apply changes nothing in
// the store. (The reads' side of the rule, that a returned object is
// the caller's, is checked with each read.)
func (s suite) ownership(t *testing.T) {
	t.Run("ApplyKeepsNoPartOfTheCommand", func(t *testing.T) {
		w := s.standard(t)
		reg := state.RegisterVolume{Volume: volume(nsDefault, "kept", pluginEBS, fsMNMW)}
		reg.Volume.MountOptions = &csi.MountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}
		reg.Volume.Topologies = []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}
		up := state.UpsertAllocations{Allocations: []csi.Allocation{
			alloc("web-9", nsDefault, "n3", "web", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeNode}),
		}}
		fp := fingerprint(pluginEBS, csi.PluginTypeNode, "n3", "", true)
		fp.NodeInfo.AccessibleTopology = &csi.Topology{Segments: map[string]string{"zone": "a"}}
		node := state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{fp}}
		cl := claim("web-9", "n3", csi.ClaimWrite, fsMNMW)
		cl.MountOptions = &csi.MountOptions{MountFlags: []string{"ro"}}
		attach := state.AttachVolume{Namespace: nsDefault, VolumeID: "kept", NodeID: "n3",
			PublishContext: map[string]string{"devicePath": "/dev/xvdf"}}
		w.must(t, reg)
		w.must(t, up)
		w.must(t, node)
		w.must(t, claimCmd(nsDefault, "kept", cl))
		w.must(t, attach)
		before := w.dump(t)

		reg.Volume.Parameters["type"] = "changed"
		reg.Volume.Context["origin"] = "changed"
		reg.Volume.Secrets["key"] = "changed"
		reg.Volume.Capabilities[0] = fsSNW
		reg.Volume.MountOptions.MountFlags[0] = "changed"
		reg.Volume.Topologies[0].Segments["zone"] = "changed"
		up.Allocations[0].Plugins[0].PluginID = "changed"
		node.Plugins[0].NodeInfo.ID = "changed"
		node.Plugins[0].NodeInfo.AccessibleTopology.Segments["zone"] = "changed"
		cl.MountOptions.MountFlags[0] = "changed"
		attach.PublishContext["devicePath"] = "changed"
		if after := w.dump(t); after != before {
			t.Errorf("changing commands after Apply changed the store:\nbefore: %s\nafter:  %s", before, after)
		}
	})
}
