package state

import "slices"

// maxIndexes is the most secondary indexes a table has (volumes).
const maxIndexes = 4

// A table holds the rows of one kind in one state: by primary key, in
// primary key order, and in each of its secondary indexes. It is a plain
// value, copied with the state; its tries and trees are changed
// copy-on-write.
//
// Rows live in a hash trie, so that a write that replaces a row (a
// claim, a checkpoint, a fingerprint) costs a few small node copies
// however large the table. order holds the primary keys alone, for
// ordered walks: it changes only when a row is added or removed.
type table[T comparable] struct {
	rows  hmap[T]
	order tree[T]
	idx   [maxIndexes]index[T]
}

// An index groups a table's rows by one value of theirs (the node of a
// claim, the allocation of an instance): a hash trie from each group to
// a tree of the group's entries, keyed by the rest of the index key,
// which ends with the row's primary key. A read of one group (a node's
// volumes) is one lookup and a walk of a tree that holds that group
// alone; a write touches its group's tree, however large the index.
type index[T comparable] struct {
	groups hmap[tree[T]]
}

// ikey is a row's place in an index.
type ikey struct {
	group, key string
}

func newTable[T comparable]() table[T] {
	t := table[T]{rows: newHmap[T]()}
	for i := range t.idx {
		t.idx[i].groups = newHmap[tree[T]]()
	}
	return t
}

// tableSpec says how a table keys its rows.
type tableSpec[T comparable] struct {
	key     func(T) string
	indexes []indexSpec[T]
}

// indexSpec is one secondary index.
type indexSpec[T comparable] struct {
	// keys returns a row's places in the index (pk, the row's primary
	// key, ends each key); none when the row is not in the index.
	keys func(row T, pk string) []ikey
	// keyOnly indexes store no row, only keys that are primary keys: a
	// write that keeps a row's keys leaves the index alone, and a read
	// looks each row up by primary key. The other indexes store the
	// row, so a read needs no second lookup, and every write of the row
	// rewrites its entries.
	keyOnly bool
	// same, if set, reports cheaply that row has the same keys in the
	// index as old, the row it replaces: put then neither computes old's
	// keys nor, for a key-only index, touches the index at all.
	same func(old, row T) bool
}

func (t *table[T]) get(pk string) (T, bool) { return t.rows.get(pk) }

// put stores row in place of the row with the same primary key, if any,
// for the write o, and brings the indexes up to date.
func (t *table[T]) put(o *owner, spec *tableSpec[T], row T) {
	pk := spec.key(row)
	old, existed := t.rows.set(o, pk, row)
	if !existed {
		var none T
		t.order.set(o, pk, none)
	}
	for i := range spec.indexes {
		ix := &spec.indexes[i]
		var val T
		if !ix.keyOnly {
			val = row
		}
		if existed && ix.same != nil && ix.same(old, row) {
			if !ix.keyOnly {
				for _, k := range ix.keys(row, pk) {
					t.idx[i].set(o, k, val)
				}
			}
			continue
		}
		var oldKeys []ikey
		if existed {
			oldKeys = ix.keys(old, pk)
		}
		newKeys := ix.keys(row, pk)
		for _, k := range oldKeys {
			if !slices.Contains(newKeys, k) {
				t.idx[i].delete(o, k)
			}
		}
		for _, k := range newKeys {
			if ix.keyOnly && slices.Contains(oldKeys, k) {
				continue
			}
			t.idx[i].set(o, k, val)
		}
	}
}

// remove deletes the row with primary key pk, if any, for the write o,
// and returns it.
func (t *table[T]) remove(o *owner, spec *tableSpec[T], pk string) (T, bool) {
	old, ok := t.rows.delete(o, pk)
	if !ok {
		return old, false
	}
	t.order.delete(o, pk)
	for i := range spec.indexes {
		for _, k := range spec.indexes[i].keys(old, pk) {
			t.idx[i].delete(o, k)
		}
	}
	return old, true
}

func (x *index[T]) set(o *owner, k ikey, val T) {
	g, _ := x.groups.get(k.group)
	g.set(o, k.key, val)
	x.groups.set(o, k.group, g)
}

func (x *index[T]) delete(o *owner, k ikey) {
	g, ok := x.groups.get(k.group)
	if !ok {
		return
	}
	if _, ok := g.delete(o, k.key); !ok {
		return
	}
	if g.len == 0 {
		x.groups.delete(o, k.group)
		return
	}
	x.groups.set(o, k.group, g)
}

// scan calls fn on each row whose primary key starts with p, in key
// order, until fn returns false.
func (t *table[T]) scan(p string, fn func(T) bool) {
	t.order.prefix(p, func(pk string, _ T) bool { return fn(t.row(pk)) })
}

// first returns the row with the smallest primary key starting with p.
func (t *table[T]) first(p string) (T, bool) {
	pk, _, ok := t.order.first(p)
	if !ok {
		var none T
		return none, false
	}
	return t.row(pk), true
}

// row returns the row of a primary key taken from an index or from
// order.
func (t *table[T]) row(pk string) T {
	row, ok := t.rows.get(pk)
	if !ok {
		// put and remove keep every index in step with the rows.
		panic("state: index entry " + pk + " has no row")
	}
	return row
}

// lookup calls fn on each row of group in index i whose key in the group
// starts with whole parts p, in key order, until fn returns false. For a
// key-only index, p is "": its keys are primary keys.
func (t *table[T]) lookup(spec *tableSpec[T], i int, group, p string, fn func(T) bool) {
	g, ok := t.idx[i].groups.get(group)
	if !ok {
		return
	}
	keyOnly := spec.indexes[i].keyOnly
	walk := func(k string, row T) bool {
		if keyOnly {
			row = t.row(k)
		}
		return fn(row)
	}
	if p == "" {
		g.ascend("", walk) // the whole group: no key to check
		return
	}
	g.prefix(p, walk)
}
