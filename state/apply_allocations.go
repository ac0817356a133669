package state

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/csikit/csikit/csi"
)

func validateAllocation(a *csi.Allocation) error {
	if err := csi.ValidateAllocationID(a.ID); err != nil {
		return err
	}
	if err := csi.ValidateNamespace(a.Namespace); err != nil {
		return fmt.Errorf("allocation %s: %w", a.ID, err)
	}
	if err := csi.ValidateNodeID(a.NodeID); err != nil {
		return fmt.Errorf("allocation %s: %w", a.ID, err)
	}
	seen := map[csi.AllocPlugin]bool{}
	for _, p := range a.Plugins {
		if err := csi.ValidatePluginID(p.PluginID); err != nil {
			return fmt.Errorf("allocation %s: %w", a.ID, err)
		}
		if !p.Type.Valid() {
			return fmt.Errorf("%w: allocation %s runs plugin %s with type %q; use controller, node or monolith",
				csi.ErrInvalidRequest, a.ID, p.PluginID, p.Type)
		}
		if seen[p] {
			return fmt.Errorf("%w: allocation %s lists plugin %s as %s twice", csi.ErrInvalidRequest, a.ID, p.PluginID, p.Type)
		}
		seen[p] = true
	}
	return nil
}

func (c UpsertAllocations) apply(w *writer) error {
	ids := map[string]bool{}
	terminal := false
	for i := range c.Allocations {
		a := &c.Allocations[i]
		if err := validateAllocation(a); err != nil {
			return err
		}
		if ids[a.ID] {
			return fmt.Errorf("%w: allocation %s appears twice in one upsert", csi.ErrInvalidRequest, a.ID)
		}
		ids[a.ID] = true
		terminal = terminal || a.Terminal
	}
	if terminal && c.ReleasedAt.IsZero() {
		return fmt.Errorf("%w: upsert of terminal allocations without ReleasedAt; set it to when they stopped",
			csi.ErrInvalidRequest)
	}
	var stopped []*csi.Allocation
	for i := range c.Allocations {
		a := c.Allocations[i].Copy()
		changed, err := w.upsertAllocation(a)
		if err != nil {
			return err
		}
		if changed && a.Terminal {
			stopped = append(stopped, a)
		}
	}
	if len(stopped) == 0 {
		return nil
	}
	stoppedIDs := make([]string, len(stopped))
	for i, a := range stopped {
		stoppedIDs[i] = a.ID
	}
	if err := w.releaseClaims(stoppedIDs, c.ReleasedAt); err != nil {
		return err
	}
	for _, a := range stopped {
		if err := w.dropInstances(a); err != nil {
			return err
		}
	}
	return nil
}

// upsertAllocation writes a and reports whether it changed anything;
// the caller releases the claims of a terminal allocation.
func (w *writer) upsertAllocation(a *csi.Allocation) (bool, error) {
	if len(a.Plugins) == 0 {
		a.Plugins = nil
	}
	old, err := getAllocation(w.txn, a.ID)
	if err != nil {
		return false, err
	}
	a.CreateIndex, a.ModifyIndex = w.index, w.index
	if old != nil {
		switch {
		case old.Terminal && !a.Terminal:
			return false, fmt.Errorf("%w: allocation %s is terminal and cannot run again; give the new run a new allocation ID",
				csi.ErrAllocationTerminal, a.ID)
		case old.Namespace != a.Namespace:
			return false, fmt.Errorf("%w: allocation %s is in namespace %s and cannot move to %s",
				csi.ErrInvalidRequest, a.ID, old.Namespace, a.Namespace)
		case old.NodeID != a.NodeID:
			return false, fmt.Errorf("%w: allocation %s runs on node %s and cannot move to node %s; place a new allocation",
				csi.ErrInvalidRequest, a.ID, old.NodeID, a.NodeID)
		}
		a.CreateIndex, a.ModifyIndex = old.CreateIndex, old.ModifyIndex
		if reflect.DeepEqual(a, old) {
			return false, nil
		}
		a.ModifyIndex = w.index
	}
	if err := w.insert(tAllocations, a); err != nil {
		return false, err
	}
	for _, x := range []*csi.Allocation{old, a} {
		sign := 1
		if x == old {
			sign = -1
		}
		for _, id := range allocPluginIDs(x) {
			c, n := expected(x, id)
			pc := w.plugin(id)
			pc.controllersExpected += sign * c
			pc.nodesExpected += sign * n
		}
	}
	return true, nil
}

// dropInstances removes the plugin instances a terminal allocation ran,
// on whichever nodes reported them.
func (w *writer) dropInstances(a *csi.Allocation) error {
	it, err := w.txn.Get(tInstances, iAlloc, a.ID)
	if err != nil {
		return dbErr("list instances of allocation", err)
	}
	var nodes []string
	for raw := it.Next(); raw != nil; raw = it.Next() {
		nodes = append(nodes, raw.(*instance).NodeID)
	}
	slices.Sort(nodes)
	for _, id := range slices.Compact(nodes) {
		n, err := getNode(w.txn, id)
		if err != nil {
			return err
		}
		keep := slices.DeleteFunc(slices.Clone(n.Plugins), func(p *csi.PluginInfo) bool { return p.AllocationID == a.ID })
		if err := w.setNodePlugins(id, keep, false); err != nil {
			return err
		}
	}
	return nil
}

func (c DeleteAllocations) apply(w *writer) error {
	for _, id := range c.AllocationIDs {
		if err := csi.ValidateAllocationID(id); err != nil {
			return err
		}
		a, err := getAllocation(w.txn, id)
		if err != nil {
			return err
		}
		if a == nil {
			continue
		}
		if !a.Terminal {
			return fmt.Errorf("%w: allocation %s is still running; upsert it as terminal before deleting it",
				csi.ErrInvalidRequest, id)
		}
		if err := w.delete(tAllocations, a); err != nil {
			return err
		}
	}
	return nil
}
