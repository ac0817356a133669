package state

import (
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

type pluginChange struct {
	controllersHealthy, nodesHealthy   int
	controllersExpected, nodesExpected int
	metas                              []*csi.PluginInfo // healthy instances written, in order
}

func (w *writer) plugin(id string) *pluginChange {
	pc := w.plugins[id]
	if pc == nil {
		pc = &pluginChange{}
		if w.plugins == nil {
			w.plugins = map[string]*pluginChange{}
		}
		w.plugins[id] = pc
	}
	return pc
}

func healthy(p *csi.PluginInfo) int {
	if p != nil && p.Healthy {
		return 1
	}
	return 0
}

// finishPlugins writes the plugin rows the command affected: it creates
// a plugin from a healthy instance, updates counts and metadata, and
// deletes a plugin left without instances.
func (w *writer) finishPlugins() error {
	if len(w.plugins) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(w.plugins))
	changes := w.plugins
	w.plugins = nil
	for _, id := range ids {
		pc := changes[id]
		row, err := getPlugin(w.txn, id)
		if err != nil {
			return err
		}
		exists, err := hasInstances(w.txn, id)
		if err != nil {
			return err
		}
		if row == nil {
			if len(pc.metas) == 0 || !exists {
				continue
			}
			p := &csi.Plugin{ID: id, CreateIndex: w.index, ModifyIndex: w.index}
			setPluginMeta(p, pc.metas)
			if err := recountPlugin(w.txn, p); err != nil {
				return err
			}
			if err := w.insert(tPlugins, p); err != nil {
				return err
			}
			continue
		}
		if !exists {
			if err := w.delete(tPlugins, row); err != nil {
				return err
			}
			continue
		}
		p := row.Copy()
		p.ControllersHealthy += pc.controllersHealthy
		p.NodesHealthy += pc.nodesHealthy
		p.ControllersExpected += pc.controllersExpected
		p.NodesExpected += pc.nodesExpected
		setPluginMeta(p, pc.metas)
		p.ModifyIndex = w.index
		if err := w.insert(tPlugins, p); err != nil {
			return err
		}
	}
	return nil
}

// setPluginMeta takes a plugin's metadata from healthy instances, in the
// order they were written.
func setPluginMeta(p *csi.Plugin, infos []*csi.PluginInfo) {
	for _, info := range infos {
		p.Provider = info.Provider
		p.Version = info.ProviderVersion
		// A split plugin's node binary may not advertise
		// CONTROLLER_SERVICE while its controller does: only an instance
		// that serves the controller may clear the flag, any instance may
		// set it. Otherwise the flag would follow whichever instance
		// reported last.
		if info.RequiresController || info.Type.HasController() {
			p.ControllerRequired = info.RequiresController
		}
	}
}

// recountPlugin computes a new plugin row's counts from its instances and
// running allocations. Later changes adjust them incrementally, so a
// fingerprint from one node never walks every node of a large cluster.
func recountPlugin(txn *memdb.Txn, p *csi.Plugin) error {
	p.ControllersHealthy, p.NodesHealthy, p.ControllersExpected, p.NodesExpected = 0, 0, 0, 0
	err := eachInstance(txn, p.ID, "", func(in *instance) error {
		if in.Role == csi.PluginTypeController {
			p.ControllersHealthy += healthy(in.Info)
		} else {
			p.NodesHealthy += healthy(in.Info)
		}
		return nil
	})
	if err != nil {
		return err
	}
	it, err := byRef(txn, tAllocations, refRunning, p.ID)
	if err != nil {
		return dbErr("list plugin allocations", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		c, n := expected(raw.(*csi.Allocation), p.ID)
		p.ControllersExpected += c
		p.NodesExpected += n
	}
	if err := it.Err(); err != nil {
		return dbErr("list plugin allocations", err)
	}
	return nil
}

// allocPluginIDs returns the distinct plugins a running allocation runs,
// sorted; none for a terminal or missing one.
func allocPluginIDs(a *csi.Allocation) []string {
	if a == nil || a.Terminal {
		return nil
	}
	var ids []string
	for _, p := range a.Plugins {
		ids = append(ids, p.PluginID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// expected returns how many controller and node instances of plugin a
// running allocation is expected to provide.
func expected(a *csi.Allocation, plugin string) (controllers, nodes int) {
	if a == nil || a.Terminal {
		return 0, 0
	}
	for _, ap := range a.Plugins {
		if ap.PluginID != plugin {
			continue
		}
		if ap.Type.HasController() {
			controllers++
		}
		if ap.Type.HasNode() {
			nodes++
		}
	}
	return controllers, nodes
}
