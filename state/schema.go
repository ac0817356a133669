package state

import (
	"errors"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// memdb table names. Instances are a table of their own so that a
// fingerprint from one node rewrites one small row, not a plugin row
// holding every node's instance; the plugin read assembles them.
const (
	tVolumes     = "volumes"
	tPlugins     = "plugins"
	tInstances   = "instances"
	tNodes       = "nodes"
	tAllocations = "allocations"
	tIndex       = "index"
)

// memdb index names.
const (
	iID    = "id"
	iRefs  = "refs"
	iAlloc = "alloc"
)

// The kinds of key in a refs index: each key is the kind, then its
// parts (see refsIndex).
const (
	// Volumes.
	refPlugin = "plugin" // plugin ID: every volume
	refNode   = "node"   // node ID, plugin ID: a node a claim (live or past) is on
	refAlloc  = "alloc"  // allocation ID: a claim's allocation (live or past)
	refPast   = "past"   // no part: the volume holds past claims
	// Allocations.
	refOnNode  = "node"   // node ID: every allocation; memdb orders a node's by allocation ID
	refRunning = "plugin" // plugin ID: the plugins a running allocation runs (its expected instances)
)

// tableOf maps a memdb table to the public Table whose index a write to
// it raises.
func tableOf(t string) Table {
	switch t {
	case tVolumes:
		return TableVolumes
	case tPlugins, tInstances:
		return TablePlugins
	case tNodes:
		return TableNodes
	case tAllocations:
		return TableAllocations
	}
	panic("state: no public table for memdb table " + t)
}

// instance is one plugin instance in one role on one node. A monolith
// fingerprint is two instances (controller and node) sharing its Info.
type instance struct {
	PluginID string
	Role     csi.PluginType // controller or node
	NodeID   string
	Info     *csi.PluginInfo
}

// indexRow holds a table's index: the log index of its last change.
type indexRow struct {
	Table Table
	Index uint64
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tVolumes: {Name: tVolumes, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(2, func(v *csi.Volume) []string {
				return []string{v.Namespace, v.ID}
			})},
			iRefs: {Name: iRefs, Indexer: refs(volumeRefs)},
		}},
		tPlugins: {Name: tPlugins, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(1, func(p *csi.Plugin) []string { return []string{p.ID} })},
		}},
		tInstances: {Name: tInstances, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(3, func(i *instance) []string {
				return []string{i.PluginID, string(i.Role), i.NodeID}
			})},
			// A terminal allocation's instances go wherever they were reported.
			iAlloc: {Name: iAlloc, AllowMissing: true, Indexer: single(1, func(i *instance) []string {
				if i.Info.AllocationID == "" {
					return nil
				}
				return []string{i.Info.AllocationID}
			})},
		}},
		tNodes: {Name: tNodes, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(1, func(n *Node) []string { return []string{n.ID} })},
		}},
		tAllocations: {Name: tAllocations, Indexes: map[string]*memdb.IndexSchema{
			iID:   {Name: iID, Unique: true, Indexer: single(1, func(a *csi.Allocation) []string { return []string{a.ID} })},
			iRefs: {Name: iRefs, Indexer: refs(allocationRefs)},
		}},
	}}
}

// claimNodes returns the distinct nodes of a volume's claims, sorted.
// volumeRefs lists a volume's keys in the refs index. A volume is
// written whole at each change, and memdb updates every index of a
// table at each write: the lookups share one index, so a write updates
// two trees, not one per lookup.
func volumeRefs(v *csi.Volume) [][]string {
	keys := [][]string{{refPlugin, v.PluginID}}
	for _, n := range claimNodes(v) {
		keys = append(keys, []string{refNode, n, v.PluginID})
	}
	var allocs []string
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for id := range m {
			allocs = append(allocs, id)
		}
	}
	slices.Sort(allocs)
	for _, id := range slices.Compact(allocs) {
		keys = append(keys, []string{refAlloc, id})
	}
	if len(v.PastClaims) > 0 {
		keys = append(keys, []string{refPast})
	}
	return keys
}

// allocationRefs lists an allocation's keys in the refs index.
func allocationRefs(a *csi.Allocation) [][]string {
	keys := [][]string{{refOnNode, a.NodeID}}
	for _, id := range allocPluginIDs(a) {
		keys = append(keys, []string{refRunning, id})
	}
	return keys
}

func claimNodes(v *csi.Volume) []string {
	var nodes []string
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			nodes = append(nodes, c.NodeID)
		}
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// A key is the concatenation of its parts, each ending in a NUL byte.
// IDs never hold a NUL (csi.ValidateID), so keys of different parts
// cannot collide, and a prefix of whole parts selects exactly the rows
// that share those parts.
func encodeKey(parts []string) []byte {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, 0)
	}
	return b
}

// keyArgs turns query arguments into keys for an index of n parts.
type keyArgs struct{ n int }

func (k keyArgs) strings(args []any) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("index argument %d is %T, not a string", i, a)
		}
		out[i] = s
	}
	return out, nil
}

func (k keyArgs) FromArgs(args ...any) ([]byte, error) {
	if len(args) != k.n {
		return nil, fmt.Errorf("index takes %d arguments, got %d", k.n, len(args))
	}
	parts, err := k.strings(args)
	if err != nil {
		return nil, err
	}
	return encodeKey(parts), nil
}

// PrefixFromArgs takes 1 to n arguments; every argument but the last is
// a whole part, the last a prefix of its part.
func (k keyArgs) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) == 0 || len(args) > k.n {
		return nil, fmt.Errorf("prefix index takes 1 to %d arguments, got %d", k.n, len(args))
	}
	parts, err := k.strings(args)
	if err != nil {
		return nil, err
	}
	b := encodeKey(parts)
	return b[:len(b)-1], nil
}

type singleIndex[T any] struct {
	keyArgs
	of func(T) []string
}

func single[T any](n int, of func(T) []string) *singleIndex[T] {
	return &singleIndex[T]{keyArgs: keyArgs{n: n}, of: of}
}

func (s *singleIndex[T]) FromObject(raw any) (bool, []byte, error) {
	obj, ok := raw.(T)
	if !ok {
		return false, nil, fmt.Errorf("index expects %T, got %T", obj, raw)
	}
	parts := s.of(obj)
	if parts == nil {
		return false, nil, nil
	}
	return true, encodeKey(parts), nil
}

// refsIndex is a table's one non-unique secondary index, keyed by
// kind: each key of an object is a kind (refPlugin, refNode, …) and its
// parts. Get takes the kind and one or more leading parts, and returns
// the objects with a key that starts with them, ordered by the rest of
// the key and then by the object's ID (memdb appends it to every key of
// a non-unique index).
type refsIndex[T any] struct {
	of func(T) [][]string
}

func refs[T any](of func(T) [][]string) *refsIndex[T] { return &refsIndex[T]{of: of} }

func (r *refsIndex[T]) FromObject(raw any) (bool, [][]byte, error) {
	obj, ok := raw.(T)
	if !ok {
		return false, nil, fmt.Errorf("index expects %T, got %T", obj, raw)
	}
	keys := r.of(obj)
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = encodeKey(k)
	}
	return len(out) > 0, out, nil
}

func (r *refsIndex[T]) FromArgs(args ...any) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("refs index takes a kind and its leading parts")
	}
	parts, err := keyArgs{}.strings(args)
	if err != nil {
		return nil, err
	}
	return encodeKey(parts), nil
}
