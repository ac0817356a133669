// apply_plugins.go owns the plugin rows. No command writes a plugin
// directly: the commands that change instances (apply_nodes.go) or
// running allocations (apply_allocations.go) record the change in
// w.plugin, and finishPlugins, which writer.run calls after each
// command, writes the rows.
//
// Rules a reader must know:
//
//   - A plugin exists while it has an instance: it is created by a
//     healthy one and deleted with its last one. Running allocations
//     alone (expected instances) do not make a plugin.
//   - Counts (healthy and expected controllers and nodes) are kept by
//     difference: each command adds what it changed. Only a new plugin
//     row is counted from its instances and allocations (recountPlugin),
//     so a fingerprint from one node never walks every node.
//   - Metadata (provider, version, ControllerRequired) comes from
//     healthy instances in the order they were written; only an instance
//     that serves the controller may clear ControllerRequired.
//   - Read a plugin row in a command only before changing instances or
//     allocations, or after run: in between, w.plugins holds changes
//     the row does not show yet.

package state

import (
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// pluginChange is what one command changed about a plugin: count
// differences and the healthy instances it wrote.
type pluginChange struct {
	controllersHealthy, nodesHealthy   int
	controllersExpected, nodesExpected int
	metas                              []*csi.PluginInfo // healthy instances written, in order
}

// plugin returns the command's change record for plugin id.
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

// healthy is 1 for a healthy instance, 0 for an unhealthy or missing
// one, so that a difference of two is a count's change.
func healthy(p *csi.PluginInfo) int {
	if p != nil && p.Healthy {
		return 1
	}
	return 0
}

// finishPlugins writes the plugin rows the command affected, in plugin
// ID order, and clears the command's change records.
func (w *writer) finishPlugins() error {
	if len(w.plugins) == 0 {
		return nil
	}
	changes := w.plugins
	w.plugins = nil
	for _, id := range slices.Sorted(maps.Keys(changes)) {
		if err := w.finishPlugin(id, changes[id]); err != nil {
			return err
		}
	}
	return nil
}

// finishPlugin writes plugin id after the change pc: it creates the
// plugin from a healthy instance, deletes one left without instances,
// or adds pc to its counts and metadata.
func (w *writer) finishPlugin(id string, pc *pluginChange) error {
	row, err := getPlugin(w.txn, id)
	if err != nil {
		return err
	}
	exists, err := hasInstances(w.txn, id)
	if err != nil {
		return err
	}
	switch {
	case row == nil && (len(pc.metas) == 0 || !exists):
		return nil // no healthy instance has made it yet
	case row == nil:
		// New: counted once from what the store holds, which includes
		// this command's changes, so pc's differences are not added.
		p := &csi.Plugin{ID: id, CreateIndex: w.index, ModifyIndex: w.index}
		setPluginMeta(p, pc.metas)
		if err := recountPlugin(w.txn, p); err != nil {
			return err
		}
		return w.insert(tPlugins, p)
	case !exists:
		if err := w.dropCapacity(id); err != nil {
			return err
		}
		return w.delete(tPlugins, row)
	}
	p := row.Copy()
	p.ControllersHealthy += pc.controllersHealthy
	p.NodesHealthy += pc.nodesHealthy
	p.ControllersExpected += pc.controllersExpected
	p.NodesExpected += pc.nodesExpected
	setPluginMeta(p, pc.metas)
	p.ModifyIndex = w.index
	return w.insert(tPlugins, p)
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
