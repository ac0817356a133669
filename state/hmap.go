package state

import (
	"hash/maphash"
	"math/bits"
	"slices"
)

// An hmap is a persistent hash trie (a hash array mapped trie) from
// string keys to values: where a table keeps its rows, for lookups and
// updates by primary key.
//
// A tree would do, but in a large table its point operations are its
// cost: a lookup compares the key with a dozen stored keys on the way
// down, and an update copies a path of large nodes, the lowest of which
// are cold. In the trie a lookup walks a few nodes by hash bits with one
// key comparison at the end, and the nodes near the bottom of a large
// table hold a handful of entries, so an update copies little that is
// not already in cache. Ordered walks stay with the tree (table.order).
//
// Copy-on-write works as in tree: a node a write owns is changed in
// place, any other node is copied once.
type hmap[V any] struct {
	root *hnode[V]
	len  int
	seed maphash.Seed
	// mask is ANDed with every hash: all ones, except in tests that
	// force shared fragments and collision lists.
	mask uint64
}

// Each level of the trie takes hashBits bits of the hash, lowest first;
// below the last level that still has hashBits bits left, a node is a
// collision list: keys whose hashes agree on every bit the levels above
// used, searched one by one.
const (
	hashBits     = 5
	hashFanout   = 1 << hashBits
	hashMaxShift = 64 - hashBits
)

// hnode is a trie node. bitmap has bit i set when the node has an entry
// for hash fragment i; entries holds them in fragment order. In a
// collision list the bitmap is unused.
type hnode[V any] struct {
	owner   *owner
	bitmap  uint32
	entries []hentry[V]
}

// hentry is one row (child nil) or one subtrie (child set).
type hentry[V any] struct {
	child *hnode[V]
	hash  uint64
	key   string
	val   V
}

// newHmap returns an empty map hashing keys with a seed of its own: key
// order in the trie depends on it, and nothing observable does.
func newHmap[V any]() hmap[V] {
	return hmap[V]{seed: maphash.MakeSeed(), mask: ^uint64(0)}
}

func (m *hmap[V]) hash(key string) uint64 { return maphash.String(m.seed, key) & m.mask }

func fragment(h uint64, shift uint) uint32 { return uint32(h>>shift) & (hashFanout - 1) }

// slot returns the position of fragment f in the entries of n and
// whether n has it.
func (n *hnode[V]) slot(f uint32) (int, bool) {
	bit := uint32(1) << f
	return bits.OnesCount32(n.bitmap & (bit - 1)), n.bitmap&bit != 0
}

func (n *hnode[V]) writable(o *owner) *hnode[V] {
	if n.owner == o {
		return n
	}
	c := &hnode[V]{owner: o, bitmap: n.bitmap, entries: make([]hentry[V], len(n.entries), len(n.entries)+1)}
	copy(c.entries, n.entries)
	return c
}

// get returns the value of key.
func (m *hmap[V]) get(key string) (V, bool) {
	if m.root == nil {
		var zero V
		return zero, false
	}
	h := m.hash(key)
	n := m.root
	for shift := uint(0); ; shift += hashBits {
		if shift > hashMaxShift {
			for i := range n.entries {
				if n.entries[i].key == key {
					return n.entries[i].val, true
				}
			}
			break
		}
		i, ok := n.slot(fragment(h, shift))
		if !ok {
			break
		}
		e := &n.entries[i]
		if e.child != nil {
			n = e.child
			continue
		}
		if e.hash == h && e.key == key {
			return e.val, true
		}
		break
	}
	var zero V
	return zero, false
}

// set stores val under key for the write o and returns the value it
// replaced, if any.
func (m *hmap[V]) set(o *owner, key string, val V) (old V, replaced bool) {
	h := m.hash(key)
	if m.root == nil {
		m.root = &hnode[V]{owner: o}
	} else {
		m.root = m.root.writable(o)
	}
	old, replaced = m.root.set(o, 0, hentry[V]{hash: h, key: key, val: val})
	if !replaced {
		m.len++
	}
	return old, replaced
}

// set stores e in the subtrie of n, a node o owns, at depth shift.
func (n *hnode[V]) set(o *owner, shift uint, e hentry[V]) (V, bool) {
	for {
		var zero V
		if shift > hashMaxShift {
			for i := range n.entries {
				if n.entries[i].key == e.key {
					old := n.entries[i].val
					n.entries[i].val = e.val
					return old, true
				}
			}
			n.entries = append(n.entries, e)
			return zero, false
		}
		f := fragment(e.hash, shift)
		i, ok := n.slot(f)
		if !ok {
			n.bitmap |= 1 << f
			n.entries = slices.Insert(n.entries, i, e)
			return zero, false
		}
		cur := &n.entries[i]
		if cur.child == nil {
			if cur.hash == e.hash && cur.key == e.key {
				old := cur.val
				cur.val = e.val
				return old, true
			}
			// Two rows share the fragment: push both one level down.
			*cur = hentry[V]{child: pair(o, shift+hashBits, *cur, e)}
			return zero, false
		}
		cur.child = cur.child.writable(o)
		n, shift = cur.child, shift+hashBits
	}
}

// pair returns a subtrie at depth shift holding two rows with different
// keys.
func pair[V any](o *owner, shift uint, a, b hentry[V]) *hnode[V] {
	if shift > hashMaxShift {
		return &hnode[V]{owner: o, entries: []hentry[V]{a, b}}
	}
	fa, fb := fragment(a.hash, shift), fragment(b.hash, shift)
	if fa == fb {
		return &hnode[V]{owner: o, bitmap: 1 << fa, entries: []hentry[V]{{child: pair(o, shift+hashBits, a, b)}}}
	}
	if fb < fa {
		a, b = b, a
		fa, fb = fb, fa
	}
	return &hnode[V]{owner: o, bitmap: 1<<fa | 1<<fb, entries: []hentry[V]{a, b}}
}

// delete removes key for the write o and returns its value, if it was
// there. Removing a missing key copies nothing. A subtrie left with a
// single row is folded into its parent, so the trie stays as shallow as
// its hashes allow.
func (m *hmap[V]) delete(o *owner, key string) (V, bool) {
	old, ok := m.get(key)
	if !ok {
		return old, false
	}
	m.root = m.root.writable(o)
	m.root.remove(o, 0, m.hash(key), key)
	if len(m.root.entries) == 0 {
		m.root = nil
	}
	m.len--
	return old, true
}

// remove deletes key, which is in the subtrie of n, a node o owns.
func (n *hnode[V]) remove(o *owner, shift uint, h uint64, key string) {
	if shift > hashMaxShift {
		n.entries = slices.DeleteFunc(n.entries, func(e hentry[V]) bool { return e.key == key })
		return
	}
	f := fragment(h, shift)
	i, _ := n.slot(f)
	e := &n.entries[i]
	if e.child == nil {
		n.bitmap &^= 1 << f
		n.entries = slices.Delete(n.entries, i, i+1)
		return
	}
	e.child = e.child.writable(o)
	e.child.remove(o, shift+hashBits, h, key)
	if c := e.child; len(c.entries) == 1 && c.entries[0].child == nil {
		*e = c.entries[0] // fold a lone row into this node
	}
}
