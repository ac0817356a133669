package state

import (
	"slices"

	"github.com/csikit/csikit/csi"
)

// db is one state of a MemStore: every table with its indexes, and the
// index of each public table. A published db never changes; a write
// copies the struct (the roots of its tries and trees, under a
// kilobyte), changes the copy's tries and trees copy-on-write (see
// hmap and tree), and publishes the copy.
//
// Instances are a table of their own so that a fingerprint from one node
// rewrites one small row, not a plugin row holding every node's
// instance; the plugin read assembles them.
type db struct {
	volumes   table[*volRow]
	plugins   table[*csi.Plugin]
	instances table[*instance]
	nodes     table[*Node]
	allocs    table[*csi.Allocation]

	// index is the log index of the last change of each public table.
	index [numTables]uint64
	// watch[t] is closed when a write publishes a state that changed
	// table t: the blocking queries of Wait.
	watch [numTables]chan struct{}
	// replaced is shared by every state since the last restore, and
	// closed when a restore replaces them.
	replaced chan struct{}
}

// emptyDB returns the state of a new store.
func emptyDB() *db {
	d := &db{
		volumes:   newTable[*volRow](),
		plugins:   newTable[*csi.Plugin](),
		instances: newTable[*instance](),
		nodes:     newTable[*Node](),
		allocs:    newTable[*csi.Allocation](),
		replaced:  make(chan struct{}),
	}
	for t := range d.watch {
		d.watch[t] = make(chan struct{})
	}
	return d
}

// tableID numbers the public tables, in the order of Tables.
type tableID int

const (
	tabVolumes tableID = iota
	tabPlugins
	tabNodes
	tabAllocations
	numTables
)

// id returns t's number, or false for a name that is no table.
func (t Table) id() (tableID, bool) {
	switch t {
	case TableVolumes:
		return tabVolumes, true
	case TablePlugins:
		return tabPlugins, true
	case TableNodes:
		return tabNodes, true
	case TableAllocations:
		return tabAllocations, true
	}
	return 0, false
}

// instance is one plugin instance in one role on one node. A monolith
// fingerprint is two instances (controller and node) sharing its Info.
type instance struct {
	PluginID string
	Role     csi.PluginType // controller or node
	NodeID   string
	Info     *csi.PluginInfo
}

// indexRow is how a table's index is written in a snapshot.
type indexRow struct {
	Table Table
	Index uint64
}

// A primary key of one part (plugins, nodes, allocations) is the ID
// itself. Other keys are the concatenation of their parts, each ending in
// a NUL byte.
// IDs never hold a NUL (csi.ValidateID), so keys of different parts
// cannot collide, a prefix of whole parts selects exactly the rows that
// share those parts, and keys sort by their parts in order. A key in an
// index group is the index's remaining parts followed by the row's
// primary key, so the rows of one index value come in primary key order.
// Both forms sort alike: for strings without a NUL, a < b exactly when
// a+"\x00" < b+"\x00".

func key1(a string) string       { return a + "\x00" }
func key2(a, b string) string    { return a + "\x00" + b + "\x00" }
func key3(a, b, c string) string { return a + "\x00" + b + "\x00" + c + "\x00" }

func volumeKey(ns, id string) string { return key2(ns, id) }

func instanceKey(plugin string, role csi.PluginType, node string) string {
	return key3(plugin, string(role), node)
}

// The indexes of each table, by position in table.idx, with the group
// each one keys its entries by.
const (
	// Volumes of a plugin, by plugin. Key only: it never changes for a
	// volume, so no claim write touches it.
	volByPlugin = iota
	// By node: one entry per node holding a claim (live or past) on
	// the volume, keyed by plugin then volume, so that a claim can count
	// a node's volumes of one plugin.
	volByNode
	// By allocation: one entry per allocation holding a claim. Key
	// only: a claim edit keeps its allocation, so only claims and
	// releases touch it.
	volByAlloc
	// One group: only the volumes with past claims, so the release
	// worker's scan costs what it has to do.
	volPast
)

const (
	// By allocation: the instances a plugin allocation ran, so that a
	// terminal allocation's instances go wherever they were reported.
	instByAlloc = iota
)

const (
	// By node: every allocation, terminal ones too, in ID order.
	allocByNode = iota
	// By plugin: only running allocations, the plugins' expected
	// instances.
	allocByPlugin
)

var volumeSpec = &tableSpec[*volRow]{
	key: func(r *volRow) string { return volumeKey(r.v.Namespace, r.v.ID) },
	indexes: []indexSpec[*volRow]{
		volByPlugin: {
			keyOnly: true,
			keys: func(r *volRow, pk string) []ikey {
				return []ikey{{r.v.PluginID, pk}}
			},
			same: func(old, r *volRow) bool { return old.v.PluginID == r.v.PluginID },
		},
		volByNode: {
			keys: func(r *volRow, pk string) []ikey {
				nodes := claimNodes(&r.v)
				keys := make([]ikey, len(nodes))
				for i, n := range nodes {
					keys[i] = ikey{n, key1(r.v.PluginID) + pk}
				}
				return keys
			},
			same: func(old, r *volRow) bool {
				return old.v.PluginID == r.v.PluginID && sameClaimants(&old.v, &r.v)
			},
		},
		volByAlloc: {
			keyOnly: true,
			keys: func(r *volRow, pk string) []ikey {
				var keys []ikey
				for _, m := range []map[string]*csi.Claim{r.v.ReadClaims, r.v.WriteClaims, r.v.PastClaims} {
					for id := range m {
						keys = append(keys, ikey{id, pk})
					}
				}
				return keys
			},
			same: func(old, r *volRow) bool { return sameClaimants(&old.v, &r.v) },
		},
		volPast: {
			keys: func(r *volRow, pk string) []ikey {
				if len(r.v.PastClaims) == 0 {
					return nil
				}
				return []ikey{{"", pk}}
			},
			same: func(old, r *volRow) bool { return (len(old.v.PastClaims) == 0) == (len(r.v.PastClaims) == 0) },
		},
	},
}

var pluginSpec = &tableSpec[*csi.Plugin]{
	key: func(p *csi.Plugin) string { return p.ID },
}

var instanceSpec = &tableSpec[*instance]{
	key: func(i *instance) string { return instanceKey(i.PluginID, i.Role, i.NodeID) },
	indexes: []indexSpec[*instance]{
		instByAlloc: {
			keyOnly: true,
			keys: func(i *instance, pk string) []ikey {
				if i.Info.AllocationID == "" {
					return nil
				}
				return []ikey{{i.Info.AllocationID, pk}}
			},
			same: func(old, i *instance) bool { return old.Info.AllocationID == i.Info.AllocationID },
		},
	},
}

var nodeSpec = &tableSpec[*Node]{
	key: func(n *Node) string { return n.ID },
}

var allocationSpec = &tableSpec[*csi.Allocation]{
	key: func(a *csi.Allocation) string { return a.ID },
	indexes: []indexSpec[*csi.Allocation]{
		allocByNode: {
			keys: func(a *csi.Allocation, pk string) []ikey {
				return []ikey{{a.NodeID, pk}}
			},
			same: func(old, a *csi.Allocation) bool { return old.NodeID == a.NodeID },
		},
		allocByPlugin: {
			keys: func(a *csi.Allocation, pk string) []ikey {
				ids := allocPluginIDs(a)
				keys := make([]ikey, len(ids))
				for i, id := range ids {
					keys[i] = ikey{id, pk}
				}
				return keys
			},
			same: func(old, a *csi.Allocation) bool {
				return old.Terminal == a.Terminal && slices.Equal(old.Plugins, a.Plugins)
			},
		},
	},
}

// sameClaimants reports whether two versions of a volume hold claims of
// the same allocations on the same nodes, in whichever maps: then they
// have the same keys in the claim-node and claim-allocation indexes. It
// relies on an allocation holding at most one claim on a volume.
func sameClaimants(old, v *csi.Volume) bool {
	if len(old.ReadClaims)+len(old.WriteClaims)+len(old.PastClaims) != len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims) {
		return false
	}
	for _, m := range [...]map[string]*csi.Claim{old.ReadClaims, old.WriteClaims, old.PastClaims} {
		for id, c := range m {
			if n := v.Claim(id); n == nil || n.NodeID != c.NodeID {
				return false
			}
		}
	}
	return true
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
