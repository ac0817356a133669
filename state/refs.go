// refs.go keeps the lookups of volumes and allocations other than by
// ID, which go-memdb's own indexes would make too costly, in two tables
// of the store's own (the figures are below). put and remove are the
// only writers of these tables, and every write of a volume or an
// allocation goes through them (writer.insert, writer.delete, and
// Restore), so the tables always match the rows of the same
// transaction, before and after its commit.

package state

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// tRefs holds the keys of every lookup of volumes and allocations other
// than by ID: one row per key of a row, its kind and parts (see
// volumeRefs and allocationRefs) followed by the row's ID. It is not a
// public table and not in snapshots; Restore rebuilds it.
//
// Why not memdb indexes: memdb stores the object itself at every key of
// every index, so each write of a row writes all its keys again, even
// those it did not change, and pays for every index of its table at
// each transaction. Most writes of a volume (a claim's checkpoint, a
// publish context, an attachment's state) change none of its keys, and
// its keys by node and allocation grow with its claims. Measured with
// memdb indexes in place of tRefs (BenchmarkSharedVolume,
// BenchmarkClaim, BenchmarkApply_Lifecycle,
// BenchmarkUpsertAllocations_ReleaseScale):
//
//   - a volume's lookups by node, attachment and allocation (measured
//     when tRefs replaced those memdb indexes): a write to a volume
//     with 1,000 claims cost 5.1-7.4 ms instead of 2.6 ms;
//   - its lookups by plugin and external ID, with tPast and the
//     allocations' lookups, as memdb indexes together: a claim took
//     about 1.5 times as long, and the lifecycle's 1,768 allocations
//     grew to 2,475;
//   - the allocations' lookups alone: releasing a stopped allocation's
//     claim took 12% more CPU time (57 instead of 51 us at 10,000
//     claims), for an AllocationsByNode 2.5 times as fast.
//
// Here a row is written when its key appears and deleted when it goes,
// and left alone otherwise. The price is on reads: a lookup through
// tRefs reads each row it yields by ID (refIter).
const tRefs = "refs"

// tPast holds a row for each volume with past claims, which the claim
// release worker lists at each scan (PastClaimVolumeIDs): a scan reads
// these small rows alone, and a write of a volume without past claims
// does not touch the table. As a conditional memdb index on volumes it
// made every volume write pay for one more index (a claim about 1.1
// times as slow) and PastClaimVolumeIDs about 1.2 times as slow, since
// it then reads each whole volume (BenchmarkClaim,
// BenchmarkPastClaimScan).
const tPast = "past"

// pastRow is a row of tPast.
type pastRow struct {
	Namespace, ID string
	ModifyIndex   uint64 // the volume's
	Owner         *idKey // the volume's key in its ID index
}

// refRow is a row of tRefs.
type refRow struct {
	Key   []byte // the table, the kind, its parts, the owner's ID parts (encodeKey)
	Owner *idKey // the owner's key in its table's ID index
}

// idKey is a row's encoded key in its table's ID index. As the one
// argument of a lookup by ID (First), it is the key as is: a lookup
// through refs encodes nothing.
type idKey struct{ key []byte }

// refKeyIndex indexes refRows by Key. Get takes the table, the kind and
// leading parts, all whole, and returns the rows whose key starts with
// them, in key order.
type refKeyIndex struct{}

func (refKeyIndex) FromObject(raw any) (bool, []byte, error) {
	r, ok := raw.(*refRow)
	if !ok {
		return false, nil, fmt.Errorf("index expects *refRow, got %T", raw)
	}
	return true, r.Key, nil
}

func (refKeyIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) < 2 {
		return nil, fmt.Errorf("refs takes a table, a kind and its leading parts, got %d arguments", len(args))
	}
	return encodeArgs(args)
}

// refsOf returns a row's keys in tRefs, sorted (they share one
// string), or ok false for a table without refs.
func refsOf(table string, obj any) (keys []string, ok bool) {
	var bBuf [512]byte
	var endBuf [16]int
	k := keyBuilder{table: table, b: bBuf[:0], ends: endBuf[:0]}
	switch table {
	case tVolumes:
		v := obj.(*csi.Volume)
		k.owner, k.nOwner = [2]string{v.Namespace, v.ID}, 2
		k = volumeRefs(k, v)
	case tAllocations:
		a := obj.(*csi.Allocation)
		k.owner, k.nOwner = [2]string{a.ID}, 1
		k = allocationRefs(k, a)
	default:
		return nil, false
	}
	return k.keys(), true
}

// ownerOf returns the key of a row of volumes or allocations in its ID
// index.
func ownerOf(table string, obj any) *idKey {
	if table == tVolumes {
		v := obj.(*csi.Volume)
		return &idKey{encodeKey([]string{v.Namespace, v.ID})}
	}
	return &idKey{encodeKey([]string{obj.(*csi.Allocation).ID})}
}

// keyBuilder encodes the keys of one row in tRefs into one buffer,
// which refsOf keeps on the stack for a row of a few keys.
type keyBuilder struct {
	table  string
	owner  [2]string // the row's ID parts: the first nOwner
	nOwner int
	b      []byte
	ends   []int // where each key ends in b
}

// add encodes the key of kind and parts: the table, them, and the
// row's ID parts (see encodeKey). It works on a copy, which it
// returns, so that a builder on the stack stays there.
func (k keyBuilder) add(kind string, parts ...string) keyBuilder {
	k.b = appendPart(appendPart(k.b, k.table), kind)
	for _, p := range parts {
		k.b = appendPart(k.b, p)
	}
	for _, p := range k.owner[:k.nOwner] {
		k.b = appendPart(k.b, p)
	}
	k.ends = append(k.ends, len(k.b))
	return k
}

// keys returns the keys added, sorted.
func (k keyBuilder) keys() []string {
	all := string(k.b)
	out := make([]string, len(k.ends))
	start := 0
	for i, end := range k.ends {
		out[i] = all[start:end]
		start = end
	}
	slices.Sort(out)
	return out
}

// put inserts obj into table, replacing the row with its ID, and writes
// the refs rows whose keys the replaced row did not have and deletes
// those obj no longer has.
func put(txn *memdb.Txn, table string, obj any) error {
	keys, ok := refsOf(table, obj)
	if !ok {
		return txn.Insert(table, obj)
	}
	owner := ownerOf(table, obj)
	old, err := txn.First(table, iID, owner)
	if err != nil {
		return err
	}
	if err := txn.Insert(table, obj); err != nil {
		return err
	}
	var was []string
	if old != nil {
		was, _ = refsOf(table, old)
	}
	if err := syncRefs(txn, owner, was, keys); err != nil {
		return err
	}
	if v, ok := obj.(*csi.Volume); ok {
		hadPast := old != nil && len(old.(*csi.Volume).PastClaims) > 0
		return syncPast(txn, v, owner, hadPast, len(v.PastClaims) > 0)
	}
	return nil
}

// syncPast writes v's row in tPast when v has past claims, and deletes
// it when v had some and has none now. owner is v's key in its ID index.
func syncPast(txn *memdb.Txn, v *csi.Volume, owner *idKey, had, has bool) error {
	switch {
	case has:
		return txn.Insert(tPast, &pastRow{Namespace: v.Namespace, ID: v.ID, ModifyIndex: v.ModifyIndex, Owner: owner})
	case had:
		return txn.Delete(tPast, &pastRow{Namespace: v.Namespace, ID: v.ID})
	}
	return nil
}

// remove deletes obj, the stored row, from table, and its refs rows.
func remove(txn *memdb.Txn, table string, obj any) error {
	if err := txn.Delete(table, obj); err != nil {
		return err
	}
	keys, ok := refsOf(table, obj)
	if !ok {
		return nil
	}
	if err := syncRefs(txn, nil, keys, nil); err != nil {
		return err
	}
	if v, ok := obj.(*csi.Volume); ok {
		return syncPast(txn, v, nil, len(v.PastClaims) > 0, false)
	}
	return nil
}

// syncRefs deletes the refs rows of keys in was and not in now, and
// inserts those in now and not in was, for the row with ID parts owner;
// both are sorted.
func syncRefs(txn *memdb.Txn, owner *idKey, was, now []string) error {
	i, j := 0, 0
	for i < len(was) || j < len(now) {
		switch {
		case j == len(now) || (i < len(was) && was[i] < now[j]):
			if err := txn.Delete(tRefs, &refRow{Key: []byte(was[i])}); err != nil {
				return err
			}
			i++
		case i == len(was) || now[j] < was[i]:
			if err := txn.Insert(tRefs, &refRow{Key: []byte(now[j]), Owner: owner}); err != nil {
				return err
			}
			j++
		default:
			i++
			j++
		}
	}
	return nil
}

// refIter yields the rows of a table that a lookup's rows (refRow,
// pastRow) name, in the lookup's order (see byRef and byPast).
type refIter struct {
	txn   *memdb.Txn
	table string
	it    memdb.ResultIterator
	err   error
}

// byRef returns the rows of table (volumes or allocations) with a key of
// kind that starts with parts, ordered by the rest of the key and then
// by the row's ID. After the last row, Err says whether a row could not
// be read.
func byRef(txn *memdb.Txn, table, kind string, parts ...string) (*refIter, error) {
	args := make([]any, 0, 2+len(parts))
	args = append(args, table, kind)
	for _, p := range parts {
		args = append(args, p)
	}
	it, err := txn.Get(tRefs, iID, args...)
	if err != nil {
		return nil, err
	}
	return &refIter{txn: txn, table: table, it: it}, nil
}

// byPast returns the volumes with past claims, in (namespace, ID) order,
// as byRef does.
func byPast(txn *memdb.Txn) (*refIter, error) {
	it, err := txn.Get(tPast, iID)
	if err != nil {
		return nil, err
	}
	return &refIter{txn: txn, table: tVolumes, it: it}, nil
}

// Next returns the next row, or nil after the last one or an error.
func (r *refIter) Next() any {
	if r.err != nil {
		return nil
	}
	raw := r.it.Next()
	if raw == nil {
		return nil
	}
	var owner *idKey
	switch row := raw.(type) {
	case *refRow:
		owner = row.Owner
	case *pastRow:
		owner = row.Owner
	}
	obj, err := r.txn.First(r.table, iID, owner)
	switch {
	case err != nil:
		r.err = err
	case obj == nil:
		// put and remove keep the lookup rows in step with the rows in
		// the same transaction; a key without its row is a bug.
		r.err = fmt.Errorf("a %s key names row %q, which is not there", r.table, owner.key)
	}
	return obj
}

// Err returns the error that ended the iteration, if any.
func (r *refIter) Err() error { return r.err }
