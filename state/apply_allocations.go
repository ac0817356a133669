// apply_allocations.go owns the allocation rows: UpsertAllocations,
// which also stops allocations, and DeleteAllocations, which forgets
// stopped ones.
//
// Rules a reader must know:
//
//   - Terminal is forever, and an allocation never changes namespace or
//     node: a new run is a new allocation ID.
//   - "Every claim of a terminal allocation is a past claim" always
//     holds: the write that makes an allocation terminal releases its
//     claims (releaseClaims) and drops the plugin instances it ran, in
//     the same transaction.
//   - A running allocation that lists plugins counts as their expected
//     instances: its writes record the difference in w.plugin for
//     finishPlugins (apply_plugins.go).
//   - Its lookups by node and by plugin are rows of tRefs (refs.go),
//     which put keeps in step: write allocations with w.insert.

package state

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/csikit/csikit/csi"
)

// validateAllocation refuses a malformed allocation.
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

// UpsertAllocations writes each allocation, then stops those that
// became terminal with this write (stopAllocations). An allocation
// that was terminal already, or is upserted unchanged, is left alone.
func (c UpsertAllocations) apply(w *writer) error {
	if err := c.validate(); err != nil {
		return err
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
	return w.stopAllocations(stopped, c.ReleasedAt)
}

// validate refuses a malformed allocation, one named twice, and
// terminal allocations without the time they stopped.
func (c UpsertAllocations) validate() error {
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
	return nil
}

// stopAllocations releases the claims of allocations that just became
// terminal, all in one pass so that a volume several of them claim is
// written once, and drops the plugin instances they ran.
func (w *writer) stopAllocations(stopped []*csi.Allocation, at time.Time) error {
	if len(stopped) == 0 {
		return nil
	}
	ids := make([]string, len(stopped))
	for i, a := range stopped {
		ids[i] = a.ID
	}
	if err := w.releaseClaims(ids, at); err != nil {
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

// DeleteAllocations removes terminal allocations; unknown ones are
// skipped, running ones refused. Their past claims stay until freed.
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
