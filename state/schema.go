package state

import (
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

// memdb index names. Every table has iID, unique; the lookups of
// volumes and allocations are in tRefs and tPast instead (refs.go says
// why). Plugin instances, written only when a node reports, also have
// iAlloc.
const (
	iID    = "id"
	iAlloc = "alloc" // instances: the allocation that runs them
)

// The kinds of key in tRefs: each key is the table, the kind, its
// parts, then the row's ID. Past claims, which every scan of the claim
// release worker lists, are in tPast instead.
const (
	// Volumes.
	refPlugin = "plugin" // plugin ID: every volume
	refNode   = "node"   // node ID, plugin ID: a node a claim (live or past) or an attachment is on
	// node ID, plugin ID: a node the volume is attached to (an
	// attachment record in any state), which counts against the
	// plugin's MaxVolumes there, so that a claim counts them from the
	// keys alone.
	refAttached = "attached"
	refAlloc    = "alloc" // allocation ID: a claim's allocation (live or past)
	// plugin ID, external volume ID: the backing volume every volume
	// stands for, which one volume at most may hold (RegisterVolume).
	// An external ID may hold a NUL, which ends a part: a lookup checks
	// the external ID of each volume it yields.
	refExternal = "external"
	// Allocations.
	refOnNode  = "node"   // node ID: every allocation
	refRunning = "plugin" // plugin ID: the plugins a running allocation runs (its expected instances)
)

// tableOf maps a memdb table to the public Table whose index a write to
// it raises.
func tableOf(t string) Table {
	switch t {
	case tVolumes, tSnapshots, tHealth: // snapshots.go and health.go say why
		return TableVolumes
	case tPlugins, tInstances, tCapacity: // capacity.go says why
		return TablePlugins
	case tNodes, tACLTokens: // apply_acl.go: who may call, like the nodes' identity
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
		}},
		tCapacity:  capacityTable(),
		tSnapshots: snapshotTable(),
		tHealth:    healthTable(),
		tACLTokens: aclTable(),
		tRefs: {Name: tRefs, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: refKeyIndex{}},
		}},
		tPast: {Name: tPast, Indexes: map[string]*memdb.IndexSchema{
			iID: {Name: iID, Unique: true, Indexer: single(2, func(p *pastRow) []string {
				return []string{p.Namespace, p.ID}
			})},
		}},
	}}
}

// volumeRefs adds a volume's keys in tRefs to k.
func volumeRefs(k keyBuilder, v *csi.Volume) keyBuilder {
	k = k.add(refPlugin, v.PluginID)
	if v.ExternalID != "" { // a volume being created has none yet
		k = k.add(refExternal, v.PluginID, v.ExternalID)
	}
	// Most volumes have a few claims: the lists stay on the stack.
	var allocBuf, nodeBuf [8]string
	allocs, nodes := allocBuf[:0], nodeBuf[:0]
	for _, m := range [...]map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for id, c := range m {
			allocs = append(allocs, id)
			nodes = append(nodes, c.NodeID)
		}
	}
	for node := range v.Attachments {
		nodes = append(nodes, node)
	}
	slices.Sort(allocs)
	for _, id := range slices.Compact(allocs) {
		k = k.add(refAlloc, id)
	}
	slices.Sort(nodes)
	for _, n := range slices.Compact(nodes) {
		k = k.add(refNode, n, v.PluginID)
		// The volume counts against the node's MaxVolumes while it is
		// attached there, in any state (checkMaxVolumes).
		if v.Attachments[n] != nil {
			k = k.add(refAttached, n, v.PluginID)
		}
	}
	return k
}

// allocationRefs adds an allocation's keys in tRefs to k.
func allocationRefs(k keyBuilder, a *csi.Allocation) keyBuilder {
	k = k.add(refOnNode, a.NodeID)
	if a.Terminal {
		return k
	}
	var buf [8]string
	ids := buf[:0]
	for _, p := range a.Plugins {
		ids = append(ids, p.PluginID)
	}
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		k = k.add(refRunning, id)
	}
	return k
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
		b = appendPart(b, p)
	}
	return b
}

// appendPart appends one part of a key to b (see encodeKey).
func appendPart(b []byte, part string) []byte { return append(append(b, part...), 0) }

// keyArgs turns query arguments into keys for an index of n parts. An
// *idKey as the one argument is a key already encoded (see refIter).
type keyArgs struct{ n int }

func (k keyArgs) FromArgs(args ...any) ([]byte, error) {
	if len(args) == 1 {
		if id, ok := args[0].(*idKey); ok {
			return id.key, nil
		}
	}
	if len(args) != k.n {
		return nil, fmt.Errorf("index takes %d arguments, got %d", k.n, len(args))
	}
	return encodeArgs(args)
}

// encodeArgs is encodeKey for query arguments, which must be strings.
func encodeArgs(args []any) ([]byte, error) {
	n := 0
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("index argument %d is %T, not a string", i, a)
		}
		n += len(s) + 1
	}
	b := make([]byte, 0, n)
	for _, a := range args {
		b = appendPart(b, a.(string))
	}
	return b, nil
}

// PrefixFromArgs takes 1 to n arguments; every argument but the last is
// a whole part, the last a prefix of its part.
func (k keyArgs) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) == 0 || len(args) > k.n {
		return nil, fmt.Errorf("prefix index takes 1 to %d arguments, got %d", k.n, len(args))
	}
	b, err := encodeArgs(args)
	if err != nil {
		return nil, err
	}
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
