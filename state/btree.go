package state

import (
	"slices"
	"strings"
)

// A tree is a persistent B-tree from string keys to values, ordered by
// key bytes: the order of a table's primary keys, and the entries of
// each group of an index.
//
// A published tree never changes. A write works on a copy of the tree
// value (the root pointer and the length) and copies each node it
// changes, once: the copy carries the write's owner, and a node whose
// owner is the write's is changed in place for the rest of that write.
// Readers of the old root keep seeing the old nodes, so every read runs
// on a consistent state without locks, and a write that fails is simply
// dropped. A node stores its items (and, if internal, its children) in
// contiguous slices, so a lookup touches a few cache lines per level and
// an in-order scan reads the items side by side.
type tree[V any] struct {
	root *bnode[V]
	len  int
}

// owner marks the nodes one write created. Nodes of a published state
// belong to writes that have ended, so no write changes them again. The
// field keeps owners distinct: pointers to zero-size values may be equal.
type owner struct{ _ byte }

// Node sizes. A node holds at most maxItems items; every node but the
// root holds at least minItems. 31 items of 24 bytes (a string header
// and a pointer) make a node of about 750 bytes: a write copies a few of
// them, and a 100,000-row table is four levels deep.
const (
	maxItems = 31
	minItems = maxItems / 2
)

type item[V any] struct {
	key string
	val V
}

// bnode is a tree node; kids is nil for a leaf, and holds
// len(items)+1 children otherwise.
type bnode[V any] struct {
	owner *owner
	items []item[V]
	kids  []*bnode[V]
}

// find returns the index of the first item not below key, and whether
// that item's key is key.
func (n *bnode[V]) find(key string) (int, bool) {
	lo, hi := 0, len(n.items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.items[m].key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.items) && n.items[lo].key == key
}

// writable returns n if o owns it, or a copy owned by o. The copy's
// slices are its own, with room for one more entry.
func (n *bnode[V]) writable(o *owner) *bnode[V] {
	if n.owner == o {
		return n
	}
	c := &bnode[V]{owner: o, items: make([]item[V], len(n.items), len(n.items)+1)}
	copy(c.items, n.items)
	if n.kids != nil {
		c.kids = make([]*bnode[V], len(n.kids), len(n.kids)+1)
		copy(c.kids, n.kids)
	}
	return c
}

// get returns the value of key.
func (t *tree[V]) get(key string) (V, bool) {
	for n := t.root; n != nil; {
		i, found := n.find(key)
		if found {
			return n.items[i].val, true
		}
		if n.kids == nil {
			break
		}
		n = n.kids[i]
	}
	var zero V
	return zero, false
}

// set stores val under key for the write o and returns the value it
// replaced, if any.
func (t *tree[V]) set(o *owner, key string, val V) (old V, replaced bool) {
	if t.root == nil {
		t.root = &bnode[V]{owner: o, items: []item[V]{{key, val}}}
		t.len = 1
		return old, false
	}
	t.root = t.root.writable(o)
	if len(t.root.items) >= maxItems {
		mid, right := t.root.split(o)
		t.root = &bnode[V]{owner: o, items: []item[V]{mid}, kids: []*bnode[V]{t.root, right}}
	}
	old, replaced = t.root.set(o, key, val)
	if !replaced {
		t.len++
	}
	return old, replaced
}

// split cuts a full node that o owns around its middle item, keeping the
// lower half, and returns the middle item and the new upper half.
func (n *bnode[V]) split(o *owner) (item[V], *bnode[V]) {
	const i = maxItems / 2
	mid := n.items[i]
	right := &bnode[V]{owner: o, items: make([]item[V], len(n.items)-i-1, len(n.items)-i)}
	copy(right.items, n.items[i+1:])
	clear(n.items[i:])
	n.items = n.items[:i]
	if n.kids != nil {
		right.kids = make([]*bnode[V], len(n.kids)-i-1, len(n.kids)-i)
		copy(right.kids, n.kids[i+1:])
		clear(n.kids[i+1:])
		n.kids = n.kids[:i+1]
	}
	return mid, right
}

// set stores key in the subtree of n, which o owns and which is not
// full. Full children are split on the way down, so an insertion never
// has to climb back.
func (n *bnode[V]) set(o *owner, key string, val V) (V, bool) {
	for {
		i, found := n.find(key)
		if found {
			old := n.items[i].val
			n.items[i].val = val
			return old, true
		}
		if n.kids == nil {
			n.items = slices.Insert(n.items, i, item[V]{key, val})
			var zero V
			return zero, false
		}
		child := n.kids[i].writable(o)
		n.kids[i] = child
		if len(child.items) >= maxItems {
			mid, right := child.split(o)
			n.items = slices.Insert(n.items, i, mid)
			n.kids = slices.Insert(n.kids, i+1, right)
			if key == mid.key {
				old := n.items[i].val
				n.items[i].val = val
				return old, true
			}
			if key > mid.key {
				child = right
			}
		}
		n = child
	}
}

// delete removes key for the write o and returns its value, if it was
// there. Removing a missing key copies nothing.
func (t *tree[V]) delete(o *owner, key string) (V, bool) {
	old, ok := t.get(key)
	if !ok {
		return old, false
	}
	t.root = t.root.writable(o)
	t.root.remove(o, key)
	if len(t.root.items) == 0 {
		if t.root.kids == nil {
			t.root = nil
		} else {
			t.root = t.root.kids[0]
		}
	}
	t.len--
	return old, true
}

// remove deletes key, which is in the subtree of n, a node o owns. Each
// child is given more than minItems items before the descent, so a
// removal never has to climb back to rebalance.
func (n *bnode[V]) remove(o *owner, key string) {
	for {
		i, found := n.find(key)
		if n.kids == nil {
			n.items = slices.Delete(n.items, i, i+1)
			return
		}
		if len(n.kids[i].items) <= minItems {
			n.grow(o, i)
			continue // items moved: search n again
		}
		child := n.kids[i].writable(o)
		n.kids[i] = child
		if found {
			// Replace the item with its predecessor, the largest key of
			// the child before it.
			n.items[i] = child.removeMax(o)
			return
		}
		n = child
	}
}

// removeMax removes and returns the largest item of the subtree of n, a
// node o owns that holds more than minItems items (or is the root).
func (n *bnode[V]) removeMax(o *owner) item[V] {
	for n.kids != nil {
		i := len(n.kids) - 1
		if len(n.kids[i].items) <= minItems {
			n.grow(o, i)
			continue
		}
		n.kids[i] = n.kids[i].writable(o)
		n = n.kids[i]
	}
	last := len(n.items) - 1
	out := n.items[last]
	n.items[last] = item[V]{}
	n.items = n.items[:last]
	return out
}

// grow gives child i of n (a node o owns) more than minItems items: it
// takes one through n from a sibling that can spare one, or merges the
// child with a sibling and the item between them.
func (n *bnode[V]) grow(o *owner, i int) {
	switch {
	case i > 0 && len(n.kids[i-1].items) > minItems:
		left, child := n.kids[i-1].writable(o), n.kids[i].writable(o)
		n.kids[i-1], n.kids[i] = left, child
		last := len(left.items) - 1
		child.items = slices.Insert(child.items, 0, n.items[i-1])
		n.items[i-1] = left.items[last]
		left.items[last] = item[V]{}
		left.items = left.items[:last]
		if left.kids != nil {
			k := len(left.kids) - 1
			child.kids = slices.Insert(child.kids, 0, left.kids[k])
			left.kids[k] = nil
			left.kids = left.kids[:k]
		}
	case i < len(n.items) && len(n.kids[i+1].items) > minItems:
		child, right := n.kids[i].writable(o), n.kids[i+1].writable(o)
		n.kids[i], n.kids[i+1] = child, right
		child.items = append(child.items, n.items[i])
		n.items[i] = right.items[0]
		right.items = slices.Delete(right.items, 0, 1)
		if right.kids != nil {
			child.kids = append(child.kids, right.kids[0])
			right.kids = slices.Delete(right.kids, 0, 1)
		}
	default:
		if i == len(n.items) {
			i-- // the last child merges with its left sibling
		}
		// The right sibling is only read: its entries move into the
		// left one, and n drops it.
		child, right := n.kids[i].writable(o), n.kids[i+1]
		n.kids[i] = child
		child.items = append(child.items, n.items[i])
		child.items = append(child.items, right.items...)
		if child.kids != nil {
			child.kids = append(child.kids, right.kids...)
		}
		n.items = slices.Delete(n.items, i, i+1)
		n.kids = slices.Delete(n.kids, i+1, i+2)
	}
}

// ascend calls fn on each item from the first key not below from, in
// key order, until fn returns false.
func (t *tree[V]) ascend(from string, fn func(key string, val V) bool) {
	if t.root != nil {
		t.root.ascend(from, true, fn)
	}
}

// ascend walks the subtree of n; seek says whether the walk still has to
// skip the keys below from (only the leftmost path of the walk does).
func (n *bnode[V]) ascend(from string, seek bool, fn func(string, V) bool) bool {
	i := 0
	if seek {
		i, _ = n.find(from)
	}
	for ; i < len(n.items); i++ {
		if n.kids != nil && !n.kids[i].ascend(from, seek, fn) {
			return false
		}
		seek = false
		if !fn(n.items[i].key, n.items[i].val) {
			return false
		}
	}
	if n.kids != nil {
		return n.kids[len(n.items)].ascend(from, seek, fn)
	}
	return true
}

// prefix calls fn on each item whose key starts with p, in key order,
// until fn returns false.
func (t *tree[V]) prefix(p string, fn func(key string, val V) bool) {
	t.ascend(p, func(k string, v V) bool {
		return strings.HasPrefix(k, p) && fn(k, v)
	})
}

// first returns the first item whose key starts with p.
func (t *tree[V]) first(p string) (key string, val V, ok bool) {
	t.prefix(p, func(k string, v V) bool {
		key, val, ok = k, v, true
		return false
	})
	return key, val, ok
}
