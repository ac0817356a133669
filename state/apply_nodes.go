// apply_nodes.go owns what nodes report: UpsertNodePlugins (a node's
// fingerprints) and DeleteNode, which write the node row and its plugin
// instances (tInstances). The plugin rows they affect are written by
// finishPlugins (apply_plugins.go) after the command.
//
// Rules a reader must know:
//
//   - A report is the node's full set: an instance it no longer names
//     is removed. A repeated report changes nothing and wakes no one.
//   - An instance is one plugin in one role on one node; a monolith
//     fingerprint is two instances, controller and node, sharing its
//     PluginInfo.
//   - A late report from a plugin task whose allocation is terminal is
//     dropped: the instance went with the allocation
//     (dropInstances in apply_allocations.go).
//   - Each instance written or removed records its change of health in
//     w.plugin, which finishPlugins turns into the plugin's counts: the
//     counts are kept by difference, never recounted from every node.

package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// instanceKey names one instance of a node: a plugin in a role.
type instanceKey struct {
	plugin string
	role   csi.PluginType
}

// roles returns the instances a fingerprint of type t makes.
func roles(t csi.PluginType) []csi.PluginType {
	switch t {
	case csi.PluginTypeController:
		return []csi.PluginType{csi.PluginTypeController}
	case csi.PluginTypeNode:
		return []csi.PluginType{csi.PluginTypeNode}
	case csi.PluginTypeMonolith:
		return []csi.PluginType{csi.PluginTypeController, csi.PluginTypeNode}
	}
	return nil
}

// expand returns a node's instances from its fingerprints.
func expand(list []*csi.PluginInfo) map[instanceKey]*csi.PluginInfo {
	m := map[instanceKey]*csi.PluginInfo{}
	for _, p := range list {
		for _, r := range roles(p.Type) {
			m[instanceKey{p.PluginID, r}] = p
		}
	}
	return m
}

// validatePluginInfo refuses a malformed fingerprint from node.
func validatePluginInfo(node string, p *csi.PluginInfo) error {
	if err := csi.ValidatePluginID(p.PluginID); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if !p.Type.Valid() {
		return fmt.Errorf("%w: node %s reports plugin %s with type %q; use controller, node or monolith",
			csi.ErrInvalidRequest, node, p.PluginID, p.Type)
	}
	if p.AllocationID != "" {
		if err := csi.ValidateAllocationID(p.AllocationID); err != nil {
			return fmt.Errorf("node %s, plugin %s: %w", node, p.PluginID, err)
		}
	}
	if ni := p.NodeInfo; ni != nil {
		if ni.ID != "" {
			if err := csi.ValidateExternalNodeID("CSI node ID", ni.ID); err != nil {
				return fmt.Errorf("node %s, plugin %s: %w", node, p.PluginID, err)
			}
		}
		if ni.MaxVolumes < 0 {
			return fmt.Errorf("%w: node %s reports plugin %s with MaxVolumes %d; use 0 for no limit",
				csi.ErrInvalidRequest, node, p.PluginID, ni.MaxVolumes)
		}
	}
	return nil
}

// UpsertNodePlugins replaces the node's instances with the report's,
// sorted by plugin and type, after checking each fingerprint and that
// no plugin is named twice in one role.
func (c UpsertNodePlugins) apply(w *writer) error {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	seen := map[instanceKey]bool{}
	list := make([]*csi.PluginInfo, 0, len(c.Plugins))
	for i := range c.Plugins {
		p := &c.Plugins[i]
		if err := validatePluginInfo(c.NodeID, p); err != nil {
			return err
		}
		for _, r := range roles(p.Type) {
			k := instanceKey{p.PluginID, r}
			if seen[k] {
				return fmt.Errorf("%w: node %s reports plugin %s as a %s instance twice; send one fingerprint per plugin and role",
					csi.ErrInvalidRequest, c.NodeID, p.PluginID, r)
			}
			seen[k] = true
		}
		if p.AllocationID != "" {
			a, err := getAllocation(w.txn, p.AllocationID)
			if err != nil {
				return err
			}
			if a != nil && a.Terminal {
				continue // a late report from a stopped plugin task
			}
		}
		info := p.Copy()
		info.UpdateTime = info.UpdateTime.UTC()
		list = append(list, info)
	}
	slices.SortFunc(list, func(a, b *csi.PluginInfo) int {
		if c := strings.Compare(a.PluginID, b.PluginID); c != 0 {
			return c
		}
		return strings.Compare(string(a.Type), string(b.Type))
	})
	old, err := getNode(w.txn, c.NodeID)
	if err != nil {
		return err
	}
	if old != nil { // a node that never registered has no secret to check
		if err := old.CheckSecretHash(c.SecretHash); err != nil {
			return err
		}
	}
	return w.setNodePlugins(c.NodeID, list, false)
}

// DeleteNode removes the node and its instances; its claims stay for
// the release worker.
func (c DeleteNode) apply(w *writer) error {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	return w.setNodePlugins(c.NodeID, nil, true)
}

// setNodePlugins replaces a node's instances with list (or deletes the
// node when remove is set) and records the effect on each plugin.
func (w *writer) setNodePlugins(nodeID string, list []*csi.PluginInfo, remove bool) error {
	old, err := getNode(w.txn, nodeID)
	if err != nil {
		return err
	}
	if old == nil && remove {
		return nil
	}
	var oldList []*csi.PluginInfo
	if old != nil {
		oldList = old.Plugins
		if !remove && reflect.DeepEqual(oldList, nilIfEmptySlice(list)) {
			return nil // a repeated report changes nothing and wakes no one
		}
	}
	oldM, newM := expand(oldList), expand(list)
	for _, k := range instanceKeys(oldM, newM) {
		o, n := oldM[k], newM[k]
		pc := w.plugin(k.plugin)
		d := healthy(n) - healthy(o)
		if k.role == csi.PluginTypeController {
			pc.controllersHealthy += d
		} else {
			pc.nodesHealthy += d
		}
		if n == nil {
			if err := w.delete(tInstances, &instance{PluginID: k.plugin, Role: k.role, NodeID: nodeID}); err != nil {
				return err
			}
			continue
		}
		if err := w.insert(tInstances, &instance{PluginID: k.plugin, Role: k.role, NodeID: nodeID, Info: n}); err != nil {
			return err
		}
		if n.Healthy {
			pc.metas = append(pc.metas, n)
		}
	}
	if remove {
		return w.delete(tNodes, old)
	}
	row := &Node{ID: nodeID, Plugins: nilIfEmptySlice(list), CreateIndex: w.index, ModifyIndex: w.index}
	if old != nil {
		row.CreateIndex = old.CreateIndex
		row.SecretHash, row.Address = old.SecretHash, old.Address
	}
	return w.insert(tNodes, row)
}

// instanceKeys returns the keys of both maps, sorted, so that instances
// and the plugins' metadata are written in the same order on every
// replica.
func instanceKeys(oldM, newM map[instanceKey]*csi.PluginInfo) []instanceKey {
	keys := slices.Collect(maps.Keys(oldM))
	for k := range newM {
		if _, ok := oldM[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b instanceKey) int {
		if c := strings.Compare(a.plugin, b.plugin); c != 0 {
			return c
		}
		return strings.Compare(string(a.role), string(b.role))
	})
	return keys
}
