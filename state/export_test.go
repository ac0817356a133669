package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// CheckIndexes recomputes every index of the store's current state from
// its rows and reports any difference from the stored indexes: a missing
// or extra key, a row index holding another row than the table, a
// key-only index holding a row. It also checks each tree's B-tree
// invariants.
func (s *MemStore) CheckIndexes() error {
	d := s.read()
	return errors.Join(
		checkTable("volumes", &d.volumes, volumeSpec),
		checkTable("plugins", &d.plugins, pluginSpec),
		checkTable("instances", &d.instances, instanceSpec),
		checkTable("nodes", &d.nodes, nodeSpec),
		checkTable("allocations", &d.allocs, allocationSpec),
		checkInstances(d),
	)
}

func checkTable[T comparable](name string, t *table[T], spec *tableSpec[T]) error {
	var errs []error
	if err := treeInvariants(&t.rows); err != nil {
		errs = append(errs, fmt.Errorf("%s rows: %w", name, err))
	}
	want := make([]map[string]T, len(spec.indexes))
	for i := range want {
		want[i] = map[string]T{}
	}
	t.rows.ascend("", func(pk string, row T) bool {
		if got := spec.key(row); got != pk {
			errs = append(errs, fmt.Errorf("%s: row under key %q has key %q", name, pk, got))
		}
		for i, ix := range spec.indexes {
			for _, k := range ix.keys(row, pk) {
				var v T
				if !ix.keyOnly {
					v = row
				}
				want[i][k] = v
			}
		}
		return true
	})
	for i := range spec.indexes {
		if err := treeInvariants(&t.idx[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s index %d: %w", name, i, err))
		}
		got := map[string]T{}
		t.idx[i].ascend("", func(k string, v T) bool {
			got[k] = v
			return true
		})
		if !maps.Equal(got, want[i]) {
			errs = append(errs, fmt.Errorf("%s index %d holds %v, the rows make %v",
				name, i, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want[i]))))
		}
	}
	for i := len(spec.indexes); i < maxIndexes; i++ {
		if t.idx[i].len != 0 {
			errs = append(errs, fmt.Errorf("%s: unused index %d holds %d keys", name, i, t.idx[i].len))
		}
	}
	return errors.Join(errs...)
}

// checkInstances checks that the instances are exactly the expansion of
// the node rows.
func checkInstances(d *db) error {
	want := map[string]bool{}
	d.nodes.scan("", func(n *Node) bool {
		for k := range expand(n.Plugins) {
			want[instanceKey(k.plugin, k.role, n.ID)] = true
		}
		return true
	})
	got := map[string]bool{}
	d.instances.scan("", func(in *instance) bool {
		got[instanceKey(in.PluginID, in.Role, in.NodeID)] = true
		return true
	})
	if !maps.Equal(got, want) {
		return fmt.Errorf("instances %q, the nodes report %q",
			strings.Join(slices.Sorted(maps.Keys(got)), " "), strings.Join(slices.Sorted(maps.Keys(want)), " "))
	}
	return nil
}

// treeInvariants checks a B-tree's shape: sorted keys, node sizes within
// bounds, one child more than items in internal nodes, leaves at one
// depth, and len equal to the number of items.
func treeInvariants[V any](tr *tree[V]) error {
	if tr.root == nil {
		if tr.len != 0 {
			return fmt.Errorf("empty tree has len %d", tr.len)
		}
		return nil
	}
	count, leafDepth := 0, -1
	var prev *string
	var walk func(n *bnode[V], depth int, root bool) error
	walk = func(n *bnode[V], depth int, root bool) error {
		if len(n.items) > maxItems || (!root && len(n.items) < minItems) || len(n.items) == 0 {
			return fmt.Errorf("node at depth %d holds %d items", depth, len(n.items))
		}
		if n.kids == nil {
			if leafDepth == -1 {
				leafDepth = depth
			} else if leafDepth != depth {
				return fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
		} else if len(n.kids) != len(n.items)+1 {
			return fmt.Errorf("node with %d items has %d children", len(n.items), len(n.kids))
		}
		for i, it := range n.items {
			if n.kids != nil {
				if err := walk(n.kids[i], depth+1, false); err != nil {
					return err
				}
			}
			if prev != nil && *prev >= it.key {
				return fmt.Errorf("key %q after %q", it.key, *prev)
			}
			k := it.key
			prev = &k
			count++
		}
		if n.kids != nil {
			return walk(n.kids[len(n.items)], depth+1, false)
		}
		return nil
	}
	if err := walk(tr.root, 0, true); err != nil {
		return err
	}
	if count != tr.len {
		return fmt.Errorf("tree holds %d items, len says %d", count, tr.len)
	}
	return nil
}
