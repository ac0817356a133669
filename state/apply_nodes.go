package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

type instanceKey struct {
	plugin string
	role   csi.PluginType
}

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

func expand(list []*csi.PluginInfo) map[instanceKey]*csi.PluginInfo {
	m := map[instanceKey]*csi.PluginInfo{}
	for _, p := range list {
		for _, r := range roles(p.Type) {
			m[instanceKey{p.PluginID, r}] = p
		}
	}
	return m
}

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
			if err := csi.ValidateExternalID("CSI node ID", ni.ID); err != nil {
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
	return w.setNodePlugins(c.NodeID, list, false)
}

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
	for _, k := range keys {
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
	}
	return w.insert(tNodes, row)
}
