package state

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
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
	if err := hmapInvariants(&t.rows); err != nil {
		errs = append(errs, fmt.Errorf("%s rows: %w", name, err))
	}
	if err := treeInvariants(&t.order); err != nil {
		errs = append(errs, fmt.Errorf("%s order: %w", name, err))
	}
	rows := hmapContents(&t.rows)
	var zero T
	var order []string
	t.order.ascend("", func(pk string, v T) bool {
		order = append(order, pk)
		if v != zero {
			errs = append(errs, fmt.Errorf("%s order holds a row under %q", name, pk))
		}
		return true
	})
	if !slices.Equal(order, slices.Sorted(maps.Keys(rows))) {
		errs = append(errs, fmt.Errorf("%s order holds %q, the rows are %q", name, order, slices.Sorted(maps.Keys(rows))))
	}
	// want[i][group][key] is what index i must hold.
	want := make([]map[string]map[string]T, len(spec.indexes))
	for i := range want {
		want[i] = map[string]map[string]T{}
	}
	for _, pk := range slices.Sorted(maps.Keys(rows)) {
		row := rows[pk]
		if got := spec.key(row); got != pk {
			errs = append(errs, fmt.Errorf("%s: row under key %q has key %q", name, pk, got))
		}
		for i, ix := range spec.indexes {
			for _, k := range ix.keys(row, pk) {
				if ix.keyOnly && k.key != pk {
					errs = append(errs, fmt.Errorf("%s index %d: key-only key %q is not the primary key %q", name, i, k.key, pk))
				}
				var v T
				if !ix.keyOnly {
					v = row
				}
				if want[i][k.group] == nil {
					want[i][k.group] = map[string]T{}
				}
				want[i][k.group][k.key] = v
			}
		}
	}
	for i := range spec.indexes {
		groups := &t.idx[i].groups
		if err := hmapInvariants(groups); err != nil {
			errs = append(errs, fmt.Errorf("%s index %d groups: %w", name, i, err))
		}
		got := map[string]map[string]T{}
		for group, g := range hmapContents(groups) {
			if err := treeInvariants(&g); err != nil {
				errs = append(errs, fmt.Errorf("%s index %d group %q: %w", name, i, group, err))
			}
			if g.len == 0 {
				errs = append(errs, fmt.Errorf("%s index %d keeps the empty group %q", name, i, group))
			}
			got[group] = map[string]T{}
			g.ascend("", func(k string, v T) bool {
				got[group][k] = v
				return true
			})
		}
		if !maps.EqualFunc(got, want[i], maps.Equal) {
			errs = append(errs, fmt.Errorf("%s index %d holds %v, the rows make %v", name, i, got, want[i]))
		}
	}
	for i := len(spec.indexes); i < maxIndexes; i++ {
		if n := t.idx[i].groups.len; n != 0 {
			errs = append(errs, fmt.Errorf("%s: unused index %d holds %d groups", name, i, n))
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

// hmapContents returns every row of a hash trie by key.
func hmapContents[V any](m *hmap[V]) map[string]V {
	out := map[string]V{}
	var walk func(n *hnode[V])
	walk = func(n *hnode[V]) {
		for _, e := range n.entries {
			if e.child != nil {
				walk(e.child)
			} else {
				out[e.key] = e.val
			}
		}
	}
	if m.root != nil {
		walk(m.root)
	}
	return out
}

// hmapInvariants checks a hash trie's shape: each entry's hash is its
// key's and matches the fragments of its path, bitmaps agree with
// entries, collision lists hold distinct keys whose hashes agree on every bit the
// levels use, no subtrie
// is empty or a lone row (those fold into their parent), and len is
// the number of rows.
func hmapInvariants[V any](m *hmap[V]) error {
	if m.root == nil {
		if m.len != 0 {
			return fmt.Errorf("empty trie has len %d", m.len)
		}
		return nil
	}
	count := 0
	var walk func(n *hnode[V], shift uint, path uint64, root bool) error
	walk = func(n *hnode[V], shift uint, path uint64, root bool) error {
		if len(n.entries) == 0 {
			return fmt.Errorf("empty node at shift %d", shift)
		}
		if !root && len(n.entries) == 1 && n.entries[0].child == nil {
			return fmt.Errorf("lone row %q in a subtrie at shift %d", n.entries[0].key, shift)
		}
		mask := uint64(1)<<shift - 1
		if shift > hashMaxShift {
			keys := map[string]bool{}
			for _, e := range n.entries {
				if e.child != nil || keys[e.key] || e.hash != m.hash(e.key) || e.hash&mask != path {
					return fmt.Errorf("bad collision list at shift %d", shift)
				}
				keys[e.key] = true
				count++
			}
			return nil
		}
		if bits.OnesCount32(n.bitmap) != len(n.entries) {
			return fmt.Errorf("bitmap %032b for %d entries at shift %d", n.bitmap, len(n.entries), shift)
		}
		i := 0
		for f := uint32(0); f < hashFanout; f++ {
			if n.bitmap&(1<<f) == 0 {
				continue
			}
			e := n.entries[i]
			i++
			sub := path | uint64(f)<<shift
			if e.child != nil {
				if err := walk(e.child, shift+hashBits, sub, false); err != nil {
					return err
				}
				continue
			}
			if full := uint64(1)<<(shift+hashBits) - 1; e.hash != m.hash(e.key) || e.hash&full != sub {
				return fmt.Errorf("row %q in the wrong place at shift %d", e.key, shift)
			}
			count++
		}
		return nil
	}
	if err := walk(m.root, 0, 0, true); err != nil {
		return err
	}
	if count != m.len {
		return fmt.Errorf("trie holds %d rows, len says %d", count, m.len)
	}
	return nil
}
