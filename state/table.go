package state

import "slices"

// maxIndexes is the most secondary indexes a table has (volumes).
const maxIndexes = 4

// A table holds the rows of one kind in one state: by primary key, and
// in each of its secondary indexes. It is a plain value, copied with the
// state; its trees are changed copy-on-write.
type table[T comparable] struct {
	rows tree[T]
	idx  [maxIndexes]tree[T]
}

// tableSpec says how a table keys its rows.
type tableSpec[T comparable] struct {
	key     func(T) string
	indexes []indexSpec[T]
}

// indexSpec is one secondary index.
type indexSpec[T comparable] struct {
	// keys returns a row's keys in the index (pk, the row's primary
	// key, ends each one); none when the row is not in the index.
	keys func(row T, pk string) []string
	// keyOnly indexes store no row, only keys: a write that keeps a
	// row's keys leaves the index alone, and a read looks each row up
	// by primary key. The other indexes store the row, so a read needs
	// no second lookup, and every write of the row rewrites its entries.
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
	for i := range spec.indexes {
		ix := &spec.indexes[i]
		if existed && ix.same != nil && ix.same(old, row) {
			if !ix.keyOnly {
				for _, k := range ix.keys(row, pk) {
					t.idx[i].set(o, k, row)
				}
			}
			continue
		}
		var oldKeys []string
		if existed {
			oldKeys = ix.keys(old, pk)
		}
		newKeys := ix.keys(row, pk)
		for _, k := range oldKeys {
			if !slices.Contains(newKeys, k) {
				t.idx[i].delete(o, k)
			}
		}
		var val T
		if !ix.keyOnly {
			val = row
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
	for i := range spec.indexes {
		for _, k := range spec.indexes[i].keys(old, pk) {
			t.idx[i].delete(o, k)
		}
	}
	return old, true
}

// scan calls fn on each row whose primary key starts with p, in key
// order, until fn returns false.
func (t *table[T]) scan(p string, fn func(T) bool) {
	t.rows.prefix(p, func(_ string, row T) bool { return fn(row) })
}

// lookup calls fn on each row of index i whose index key starts with
// whole parts p, in index key order, until fn returns false. For a
// key-only index, p must hold every part of the index, so that the
// primary key is the rest of the index key.
func (t *table[T]) lookup(spec *tableSpec[T], i int, p string, fn func(T) bool) {
	keyOnly := spec.indexes[i].keyOnly
	t.idx[i].prefix(p, func(k string, row T) bool {
		if keyOnly {
			var ok bool
			if row, ok = t.rows.get(k[len(p):]); !ok {
				// put and remove keep every index in step with the rows.
				panic("state: index entry " + k + " has no row")
			}
		}
		return fn(row)
	})
}
