package state

import (
	"fmt"
	"slices"
	"strings"

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
	iID         = "id"
	iPlugin     = "plugin"
	iClaimNode  = "claim_node"
	iClaimAlloc = "claim_alloc"
	iPast       = "past"
	iAlloc      = "alloc"
	iNode       = "node"
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
			iPlugin: {Name: iPlugin, Indexer: single(1, func(v *csi.Volume) []string {
				return []string{v.PluginID}
			})},
			// One key per node holding a claim (live or past); the plugin
			// in the key lets a claim count a node's volumes of one plugin.
			iClaimNode: {Name: iClaimNode, AllowMissing: true, Indexer: multi(2, func(v *csi.Volume) [][]string {
				var keys [][]string
				for _, n := range claimNodes(v) {
					keys = append(keys, []string{n, v.PluginID})
				}
				return keys
			})},
			iClaimAlloc: {Name: iClaimAlloc, AllowMissing: true, Indexer: multi(1, func(v *csi.Volume) [][]string {
				var keys [][]string
				for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
					for id := range m {
						keys = append(keys, []string{id})
					}
				}
				slices.SortFunc(keys, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
				return keys
			})},
			// Only volumes with past claims are in this index, so the
			// release worker's scan costs what it has to do.
			iPast: {Name: iPast, AllowMissing: true, Indexer: single(1, func(v *csi.Volume) []string {
				if len(v.PastClaims) == 0 {
					return nil
				}
				return []string{"past"}
			})},
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
			iID: {Name: iID, Unique: true, Indexer: single(1, func(a *csi.Allocation) []string { return []string{a.ID} })},
			// Every allocation, terminal ones too; memdb orders a node's
			// entries by allocation ID.
			iNode: {Name: iNode, Indexer: single(1, func(a *csi.Allocation) []string { return []string{a.NodeID} })},
			// Only running allocations: they are the plugins' expected
			// instances.
			iPlugin: {Name: iPlugin, AllowMissing: true, Indexer: multi(1, func(a *csi.Allocation) [][]string {
				var keys [][]string
				for _, id := range allocPluginIDs(a) {
					keys = append(keys, []string{id})
				}
				return keys
			})},
		}},
		tIndex: {Name: tIndex, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(1, func(r *indexRow) []string { return []string{string(r.Table)} })},
		}},
	}}
}

// claimNodes returns the distinct nodes of a volume's claims, sorted.
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

type multiIndex[T any] struct {
	keyArgs
	of func(T) [][]string
}

func multi[T any](n int, of func(T) [][]string) *multiIndex[T] {
	return &multiIndex[T]{keyArgs: keyArgs{n: n}, of: of}
}

func (m *multiIndex[T]) FromObject(raw any) (bool, [][]byte, error) {
	obj, ok := raw.(T)
	if !ok {
		return false, nil, fmt.Errorf("index expects %T, got %T", obj, raw)
	}
	keys := m.of(obj)
	if len(keys) == 0 {
		return false, nil, nil
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = encodeKey(k)
	}
	return true, out, nil
}
