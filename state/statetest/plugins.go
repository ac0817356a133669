package statetest

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// counts is a plugin's four counters, for comparisons.
type counts struct{ CH, CE, NH, NE int }

func countsOf(p *csi.Plugin) counts {
	return counts{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected}
}

func (s suite) plugins(t *testing.T) {
	t.Run("CreatedFromHealthyFingerprints", func(t *testing.T) {
		w := s.standard(t)
		p := w.plugin(t, pluginEBS)
		if p.Provider != provider || p.Version != "1.2.0" || !p.ControllerRequired {
			t.Errorf("plugin metadata = %q %q %t", p.Provider, p.Version, p.ControllerRequired)
		}
		if got, want := countsOf(p), (counts{1, 1, 2, 2}); got != want {
			t.Errorf("counts = %+v, want %+v", got, want)
		}
		if got := slices.Sorted(maps.Keys(p.Controllers)); !slices.Equal(got, []string{"n1"}) {
			t.Errorf("Controllers on %v, want [n1]", got)
		}
		if got := slices.Sorted(maps.Keys(p.Nodes)); !slices.Equal(got, []string{"n1", "n2"}) {
			t.Errorf("Nodes on %v, want [n1 n2]", got)
		}
		if n := p.Nodes["n2"]; n == nil || n.NodeInfo == nil || n.NodeInfo.ID != "ext-n2" || n.AllocationID != "ebs-node-2" {
			t.Errorf("Nodes[n2] = %s", toJSON(n))
		}
		want := []csi.PluginAllocation{
			{AllocationID: "ebs-ctl-1", NodeID: "n1", JobID: "ebs-controller", TaskGroup: "ebs-controller-group", Type: csi.PluginTypeController},
			{AllocationID: "ebs-node-1", NodeID: "n1", JobID: "ebs-nodes", TaskGroup: "ebs-nodes-group", Type: csi.PluginTypeNode},
			{AllocationID: "ebs-node-2", NodeID: "n2", JobID: "ebs-nodes", TaskGroup: "ebs-nodes-group", Type: csi.PluginTypeNode},
		}
		if got := p.Allocations; !slices.Equal(got, want) {
			t.Errorf("Allocations = %s, want %s", toJSON(got), toJSON(want))
		}
		if !p.Schedulable() || !p.NeedsControllerPublish() {
			t.Errorf("Schedulable %t NeedsControllerPublish %t, want both", p.Schedulable(), p.NeedsControllerPublish())
		}
		ps, err := w.s.Plugins()
		if err != nil || len(ps) != 1 || toJSON(ps[0]) != toJSON(p) {
			t.Errorf("Plugins() = %s, %v; want [%s]", toJSON(ps), err, toJSON(p))
		}
	})

	t.Run("ControllerRequiredNotClearedByNodeInstance", func(t *testing.T) {
		// A split plugin whose node binary does not advertise
		// CONTROLLER_SERVICE must not flip the plugin's flag back and
		// forth with the order of reports.
		w := s.standard(t)
		node := fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true)
		node.RequiresController = false
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{node}})
		if p := w.plugin(t, pluginEBS); !p.ControllerRequired || !p.NeedsControllerPublish() {
			t.Errorf("after a node instance without CONTROLLER_SERVICE: ControllerRequired %t, NeedsControllerPublish %t; want both",
				p.ControllerRequired, p.NeedsControllerPublish())
		}
		ctl := fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true)
		ctl.RequiresController = false
		node1 := fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true)
		node1.RequiresController = false
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{ctl, node1}})
		if p := w.plugin(t, pluginEBS); p.ControllerRequired {
			t.Errorf("a controller instance reporting no CONTROLLER_SERVICE must clear ControllerRequired")
		}
	})

	t.Run("NotCreatedFromUnhealthy", func(t *testing.T) {
		w := s.standard(t)
		before := w.index(t, state.TablePlugins)
		w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{
			fingerprint("nfs", csi.PluginTypeNode, "n3", "", false),
		}})
		if _, err := w.s.Plugin("nfs"); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Errorf("Plugin(nfs) after an unhealthy fingerprint: %v, want ErrPluginNotFound", err)
		}
		if ps, _ := w.s.Plugins(); len(ps) != 1 {
			t.Errorf("Plugins() = %d plugins, want 1", len(ps))
		}
		if idx := w.index(t, state.TablePlugins); idx < before {
			t.Errorf("Index(plugins) went back from %d to %d", before, idx)
		}
		n, err := w.s.Node("n3")
		if err != nil || n.NodeInstance("nfs") == nil || n.NodeInstance("nfs").Healthy {
			t.Errorf("Node(n3) = %s, %v; want its unhealthy nfs instance", toJSON(n), err)
		}
		// A healthy report from another node creates the plugin, which
		// then lists the unhealthy instance too.
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true),
			fingerprint("nfs", csi.PluginTypeNode, "n2", "", true),
		}})
		p := w.plugin(t, "nfs")
		if got := countsOf(p); got != (counts{0, 0, 1, 0}) || len(p.Nodes) != 2 {
			t.Errorf("nfs = %s, want 2 node instances, 1 healthy", toJSON(p))
		}
	})

	t.Run("UpdatedFromUnhealthy", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", false),
		}})
		p := w.plugin(t, pluginEBS)
		if got := countsOf(p); got != (counts{1, 1, 1, 2}) {
			t.Errorf("counts = %+v, want {1 1 1 2}", got)
		}
		if n := p.Nodes["n2"]; n == nil || n.Healthy || n.HealthDescription != "probe failed" {
			t.Errorf("Nodes[n2] = %s, want the unhealthy instance", toJSON(n))
		}
		if p.ModifyIndex != w.idx || w.index(t, state.TablePlugins) != w.idx {
			t.Errorf("ModifyIndex %d, Index(plugins) %d, want %d", p.ModifyIndex, w.index(t, state.TablePlugins), w.idx)
		}
		if v := w.volume(t, nsDefault, "shared"); v.NodesHealthy != 1 || !v.Schedulable {
			t.Errorf("volume read: NodesHealthy %d Schedulable %t, want 1 true", v.NodesHealthy, v.Schedulable)
		}
	})

	t.Run("AbsentInstancesRemoved", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
		}})
		p := w.plugin(t, pluginEBS)
		if len(p.Controllers) != 0 || len(p.Nodes) != 2 || countsOf(p) != (counts{0, 1, 2, 2}) {
			t.Errorf("after n1 dropped its controller: %s", toJSON(p))
		}
		ctl, err := w.s.HealthyControllers(pluginEBS)
		if err != nil || len(ctl) != 0 {
			t.Errorf("HealthyControllers = %v, %v; want none", ctl, err)
		}
		if n, _ := w.s.Node("n1"); n.ControllerInstance(pluginEBS) != nil || n.NodeInstance(pluginEBS) == nil {
			t.Errorf("Node(n1) = %s", toJSON(n))
		}
	})

	t.Run("LastInstanceDeletesPlugin", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertNodePlugins{NodeID: "n1"})
		w.must(t, state.DeleteNode{NodeID: "n2"})
		if _, err := w.s.Plugin(pluginEBS); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Errorf("Plugin(ebs) with no instance left: %v, want ErrPluginNotFound", err)
		}
		vols, err := w.s.VolumesByPlugin(pluginEBS)
		if err != nil || len(vols) != 5 {
			t.Fatalf("VolumesByPlugin(ebs) = %d volumes, %v; the volumes stay", len(vols), err)
		}
		if v := vols[0]; v.Schedulable || v.NodesHealthy != 0 || v.Provider != provider {
			t.Errorf("volume of a deleted plugin: Schedulable %t NodesHealthy %d Provider %q", v.Schedulable, v.NodesHealthy, v.Provider)
		}
	})

	t.Run("DeleteNode", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimRead, fsMNMW)))
		w.must(t, state.DeleteNode{NodeID: "n2"})
		if _, err := w.s.Node("n2"); !errors.Is(err, csi.ErrNodeNotFound) {
			t.Errorf("Node(n2) after delete: %v", err)
		}
		p := w.plugin(t, pluginEBS)
		if _, ok := p.Nodes["n2"]; ok || countsOf(p) != (counts{1, 1, 1, 2}) {
			t.Errorf("plugin after deleting n2: %s", toJSON(p))
		}
		// Claims stay for the release worker.
		if c := w.volume(t, nsDefault, "shared").ReadClaims["web-2"]; c == nil {
			t.Errorf("deleting a node dropped a claim on it")
		}
		w.noop(t, state.DeleteNode{NodeID: "n2"})
		w.refuse(t, state.DeleteNode{NodeID: "n/2"}, csi.ErrInvalidID)
	})

	t.Run("HealthyControllers", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{
			alloc("ebs-ctl-2", nsDefault, "n2", "ebs-controller", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeController}),
			alloc("ebs-ctl-3", nsDefault, "n3", "ebs-controller", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeController}),
		}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeController, "n2", "ebs-ctl-2", true),
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true),
		}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeController, "n3", "ebs-ctl-3", false),
		}})
		ctl, err := w.s.HealthyControllers(pluginEBS)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(ctl)); !slices.Equal(got, []string{"n1", "n2"}) {
			t.Errorf("HealthyControllers on %v, want [n1 n2]", got)
		}
		if c := ctl["n2"]; c == nil || c.AllocationID != "ebs-ctl-2" || c.ControllerInfo == nil {
			t.Errorf("HealthyControllers[n2] = %s", toJSON(c))
		}
		ctl["n1"].Healthy = false
		delete(ctl, "n2")
		if again, _ := w.s.HealthyControllers(pluginEBS); len(again) != 2 || !again["n1"].Healthy {
			t.Errorf("changing the returned map changed the store: %s", toJSON(again))
		}
		if got := countsOf(w.plugin(t, pluginEBS)); got != (counts{2, 3, 2, 2}) {
			t.Errorf("counts = %+v, want {2 3 2 2}", got)
		}
	})

	t.Run("Monolith", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{
			alloc("mono-1", nsDefault, "n3", "hostpath", csi.AllocPlugin{PluginID: "hostpath", Type: csi.PluginTypeMonolith}),
		}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{
			fingerprint("hostpath", csi.PluginTypeMonolith, "n3", "mono-1", true),
		}})
		p := w.plugin(t, "hostpath")
		if countsOf(p) != (counts{1, 1, 1, 1}) || p.Controllers["n3"] == nil || p.Nodes["n3"] == nil {
			t.Errorf("monolith plugin = %s", toJSON(p))
		}
		n, err := w.s.Node("n3")
		if err != nil || n.ControllerInstance("hostpath") == nil || n.NodeInstance("hostpath") == nil || len(n.Plugins) != 1 {
			t.Errorf("Node(n3) = %s, %v", toJSON(n), err)
		}
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(alloc("mono-1", nsDefault, "n3", "hostpath",
			csi.AllocPlugin{PluginID: "hostpath", Type: csi.PluginTypeMonolith}))}, ReleasedAt: t0})
		if _, err := w.s.Plugin("hostpath"); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Errorf("Plugin(hostpath) after its only allocation stopped: %v", err)
		}
	})

	t.Run("BadFingerprints", func(t *testing.T) {
		w := s.standard(t)
		dupe := fingerprint(pluginEBS, csi.PluginTypeNode, "n3", "", true)
		mono := fingerprint(pluginEBS, csi.PluginTypeMonolith, "n3", "", true)
		badType := fingerprint(pluginEBS, "sidecar", "n3", "", true)
		badAlloc := fingerprint(pluginEBS, csi.PluginTypeNode, "n3", "a b", true)
		badPlugin := fingerprint("", csi.PluginTypeNode, "n3", "", true)
		negMax := fingerprint(pluginEBS, csi.PluginTypeNode, "n3", "", true)
		negMax.NodeInfo.MaxVolumes = -1
		for _, tc := range []struct {
			name string
			cmd  state.UpsertNodePlugins
			want error
		}{
			{"BadNode", state.UpsertNodePlugins{NodeID: "..", Plugins: []csi.PluginInfo{dupe}}, csi.ErrInvalidID},
			{"Duplicate", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{dupe, dupe}}, csi.ErrInvalidRequest},
			{"MonolithAndNode", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{dupe, mono}}, csi.ErrInvalidRequest},
			{"BadType", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{badType}}, csi.ErrInvalidRequest},
			{"BadAllocation", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{badAlloc}}, csi.ErrInvalidID},
			{"BadPlugin", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{badPlugin}}, csi.ErrInvalidID},
			{"NegativeMaxVolumes", state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{negMax}}, csi.ErrInvalidRequest},
		} {
			t.Run(tc.name, func(t *testing.T) { w.refuse(t, tc.cmd, tc.want) })
		}
	})

	t.Run("TerminalPluginAllocationDropsInstance", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocEBSNode("n2"))}, ReleasedAt: t0})
		p := w.plugin(t, pluginEBS)
		if _, ok := p.Nodes["n2"]; ok || countsOf(p) != (counts{1, 1, 1, 1}) {
			t.Errorf("plugin after ebs-node-2 stopped: %s", toJSON(p))
		}
		for _, a := range p.Allocations {
			if a.AllocationID == "ebs-node-2" {
				t.Errorf("Allocations still lists the terminal ebs-node-2")
			}
		}
		if n, err := w.s.Node("n2"); err != nil || n.NodeInstance(pluginEBS) != nil {
			t.Errorf("Node(n2) = %s, %v; want no ebs instance", toJSON(n), err)
		}
		// A late fingerprint from the stopped task is ignored.
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true),
		}})
		if p := w.plugin(t, pluginEBS); p.Nodes["n2"] != nil {
			t.Errorf("late fingerprint of a terminal allocation came back: %s", toJSON(p.Nodes["n2"]))
		}
		// Its replacement is welcome.
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{
			alloc("ebs-node-2b", nsDefault, "n2", "ebs-nodes", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeNode}),
		}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2b", true),
		}})
		if got := countsOf(w.plugin(t, pluginEBS)); got != (counts{1, 1, 2, 2}) {
			t.Errorf("counts after replacement = %+v, want {1 1 2 2}", got)
		}
	})

	t.Run("SeveralPluginsOneJob", func(t *testing.T) {
		w := s.standard(t)
		multi := alloc("storage-1", nsDefault, "n3", "storage",
			csi.AllocPlugin{PluginID: "blk", Type: csi.PluginTypeNode},
			csi.AllocPlugin{PluginID: "obj", Type: csi.PluginTypeMonolith})
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{multi}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{
			fingerprint("blk", csi.PluginTypeNode, "n3", "storage-1", true),
			fingerprint("obj", csi.PluginTypeMonolith, "n3", "storage-1", true),
		}})
		if got := countsOf(w.plugin(t, "blk")); got != (counts{0, 0, 1, 1}) {
			t.Errorf("blk counts = %+v", got)
		}
		if got := countsOf(w.plugin(t, "obj")); got != (counts{1, 1, 1, 1}) {
			t.Errorf("obj counts = %+v", got)
		}
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(multi)}, ReleasedAt: t0})
		for _, id := range []string{"blk", "obj"} {
			if _, err := w.s.Plugin(id); !errors.Is(err, csi.ErrPluginNotFound) {
				t.Errorf("Plugin(%s) after its job stopped: %v", id, err)
			}
		}
		if got := countsOf(w.plugin(t, pluginEBS)); got != (counts{1, 1, 2, 2}) {
			t.Errorf("ebs changed: %+v", got)
		}
	})

	t.Run("OnePluginSeveralJobs", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{
			alloc("ebs-edge-3", nsDefault, "n3", "ebs-edge", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeNode}),
		}})
		w.must(t, state.UpsertNodePlugins{NodeID: "n3", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n3", "ebs-edge-3", true),
		}})
		p := w.plugin(t, pluginEBS)
		jobs := map[string]bool{}
		for _, a := range p.Allocations {
			jobs[a.JobID] = true
		}
		if got := slices.Sorted(maps.Keys(jobs)); !slices.Equal(got, []string{"ebs-controller", "ebs-edge", "ebs-nodes"}) {
			t.Errorf("jobs = %v", got)
		}
		if got := countsOf(p); got != (counts{1, 1, 3, 3}) {
			t.Errorf("counts = %+v, want {1 1 3 3}", got)
		}
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocEBSNode("n1")), terminal(allocEBSNode("n2"))}, ReleasedAt: t0})
		if got := countsOf(w.plugin(t, pluginEBS)); got != (counts{1, 1, 1, 1}) {
			t.Errorf("counts after job ebs-nodes stopped = %+v, want {1 1 1 1}", got)
		}
	})

	t.Run("ExpectedBeforeFingerprint", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{allocEBSController(), allocEBSNode("n1"), allocEBSNode("n2")}})
		if _, err := w.s.Plugin(pluginEBS); !errors.Is(err, csi.ErrPluginNotFound) {
			t.Errorf("allocations alone created the plugin: %v", err)
		}
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
		}})
		if got := countsOf(w.plugin(t, pluginEBS)); got != (counts{0, 1, 1, 2}) {
			t.Errorf("counts = %+v, want {0 1 1 2}", got)
		}
	})

	t.Run("ReadReturnsCopy", func(t *testing.T) {
		w := s.standard(t)
		before := w.dump(t)
		p := w.plugin(t, pluginEBS)
		p.Controllers["n1"].Healthy = false
		p.Controllers["n1"].ControllerInfo.Capabilities.PublishUnpublishVolume = false
		p.Nodes["n2"].NodeInfo.ID = "changed"
		delete(p.Nodes, "n1")
		p.Allocations[0].JobID = "changed"
		p.NodesHealthy = 99
		n, err := w.s.Node("n1")
		if err != nil {
			t.Fatal(err)
		}
		n.Plugins[0].Healthy = false
		n.Plugins = nil
		a, err := w.s.Allocation("ebs-ctl-1")
		if err != nil {
			t.Fatal(err)
		}
		a.Plugins[0].PluginID = "changed"
		a.Terminal = true
		if after := w.dump(t); after != before {
			t.Errorf("changing returned objects changed the store:\nbefore: %s\nafter:  %s", before, after)
		}
	})
}
