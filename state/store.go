package state

import (
	"context"
	"io"
	"slices"

	"github.com/csikit/csikit/csi"
)

// Table names a group of objects whose changes a blocking query can wait
// for. Every write raises the index of each table it changed to the
// write's log index.
type Table string

// The tables of a Store.
const (
	TableVolumes     Table = "volumes"
	TablePlugins     Table = "plugins"
	TableNodes       Table = "nodes"
	TableAllocations Table = "allocations"
)

// Tables lists every Table, in a fixed order.
func Tables() []Table {
	return []Table{TableVolumes, TablePlugins, TableNodes, TableAllocations}
}

// VolumeReader reads volumes.
//
// Every method is safe to call from any goroutine, concurrently with
// writes; each call sees one consistent state.
//
// Ownership: the caller owns what is returned. Each volume is a deep
// copy, its claims, attachments, maps and slices included: the caller
// may change or keep it, the store never sees the change, and no later
// write changes the copy. (go-memdb hands out the objects it stores; a
// Store never does.) A Store implementation must keep this rule: a
// caller that edits a returned volume, for example to build a command,
// must not be able to change the store or another reader's copy.
//
// Volumes carry their plugin's provider, ControllerRequired, Schedulable
// and health counts as of the read. Lists are sorted by (namespace, ID).
// An invalid ID is an error matching csi.ErrInvalidID; a missing volume
// matches csi.ErrVolumeNotFound. Other errors come from the backing
// database and may be retried.
type VolumeReader interface {
	// Volume returns one volume, a copy the caller owns.
	Volume(namespace, id string) (*csi.Volume, error)
	// Volumes returns the volumes of namespace whose ID starts with
	// idPrefix; namespace "" means every namespace. The caller owns the
	// slice and every volume in it.
	Volumes(namespace, idPrefix string) ([]*csi.Volume, error)
	// VolumesByPlugin returns the volumes of one plugin, copies the
	// caller owns.
	VolumesByPlugin(pluginID string) ([]*csi.Volume, error)
	// VolumesByNode returns the volumes with a claim, live or past, or
	// an attachment record (an adopted leak has no claim) on a node,
	// copies the caller owns. It reads an index: its cost does not
	// grow with the number of nodes or volumes in the store.
	VolumesByNode(nodeID string) ([]*csi.Volume, error)
	// VolumesWithPastClaims returns the volumes that hold at least one
	// past claim: the claim release worker's queue. The caller owns
	// them.
	VolumesWithPastClaims() ([]*csi.Volume, error)
	// PastClaimVolumeIDs returns the key and ModifyIndex of each volume
	// VolumesWithPastClaims would return, in the same order, without
	// copying the volumes: its cost is a walk of the index, not a copy
	// of every volume and its claims. The release worker scans with it
	// and reads a volume only when it releases its claims. The caller
	// owns the slice; a stamp's strings may be the store's own, which is
	// safe because Go strings cannot be changed.
	PastClaimVolumeIDs() ([]VolumeStamp, error)
}

// VolumeKey identifies a volume.
type VolumeKey struct {
	Namespace, ID string
}

// VolumeStamp is a volume's key and the log index of its last change
// (csi.Volume.ModifyIndex) as of one read. A reader that remembers the
// ModifyIndex it last acted on can tell from a stamp whether the volume
// changed since, without reading the volume.
type VolumeStamp struct {
	VolumeKey
	ModifyIndex uint64
}

// PluginReader reads plugins. The contract of VolumeReader applies,
// ownership included: every plugin, instance map and PluginInfo
// returned is a deep copy the caller owns. A missing plugin matches
// csi.ErrPluginNotFound.
type PluginReader interface {
	// Plugin returns one plugin with its instances and the non-terminal
	// allocations that run it (sorted by allocation ID, then type), a
	// copy the caller owns.
	Plugin(id string) (*csi.Plugin, error)
	// Plugins returns every plugin, sorted by ID, copies the caller
	// owns.
	Plugins() ([]*csi.Plugin, error)
	// HealthyControllers returns the healthy controller instances of a
	// plugin, keyed by host node ID; the map is empty (not an error) when
	// the plugin exists but no controller is healthy. Its cost grows with
	// the plugin's controller instances only, not with the nodes of the
	// cluster: the router calls it for every controller RPC. The caller
	// owns the map and the PluginInfo copies in it.
	HealthyControllers(pluginID string) (map[string]*csi.PluginInfo, error)
}

// NodeReader reads what nodes reported. The contract of VolumeReader
// applies, ownership included; an unknown node matches
// csi.ErrNodeNotFound.
type NodeReader interface {
	// Node returns the plugin instances a node last reported, a deep
	// copy the caller owns.
	Node(id string) (*Node, error)
}

// AllocationReader reads allocations. The contract of VolumeReader
// applies, ownership included; an unknown allocation matches
// csi.ErrAllocationNotFound.
type AllocationReader interface {
	// Allocation returns one allocation, a copy the caller owns.
	Allocation(id string) (*csi.Allocation, error)
	// AllocationsByNode returns the allocations placed on a node,
	// terminal ones included (until DeleteAllocations removes them),
	// sorted by ID, copies the caller owns; none is an empty list, not
	// an error. It reads an index: its cost does not grow with the
	// number of nodes or allocations in the store.
	AllocationsByNode(nodeID string) ([]*csi.Allocation, error)
}

// Watcher lets a reader block until something changed instead of
// polling. A blocking query reads Index first, then the data, then calls
// Wait with the index it read: a write that landed in between makes Wait
// return at once, so nothing is missed.
type Watcher interface {
	// Index returns the log index of the last write that changed table
	// (0 if none has).
	Index(table Table) (uint64, error)
	// Wait blocks until table's index is above minIndex and returns it.
	// It also returns, with the current index (which may be lower), when
	// the whole state was replaced by a restore. It returns ctx.Err()
	// when ctx ends first. Unknown tables are an error matching
	// csi.ErrInvalidRequest. Wait starts no goroutine.
	Wait(ctx context.Context, table Table, minIndex uint64) (uint64, error)
}

// PastClaimWatcher is implemented by stores that can tell when the
// volumes with past claims change, apart from every other write to the
// volume table. The claim release worker waits with it when the store
// has it: a write that claims, publishes or registers a volume without
// past claims does not wake it. Find it with a type assertion; a store
// without it is watched through Watcher on TableVolumes.
type PastClaimWatcher interface {
	// PastClaimsIndex returns the log index of the last write that
	// changed or removed a volume holding past claims before or after
	// the write (a claim released, checkpointed or freed, any other
	// change to such a volume, its deregistration); 0 if none has.
	// After a restore it is the restored volume table's index. It is
	// at most Index(TableVolumes), and a read that follows it sees
	// that write.
	PastClaimsIndex() (uint64, error)
	// WaitPastClaims blocks until PastClaimsIndex is above minIndex and
	// returns it. Like Watcher.Wait, it also returns, with the current
	// index, when a restore replaced the whole state, returns ctx.Err()
	// when ctx ends first, and starts no goroutine.
	WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error)
}

// Reader is everything a read-only consumer (the router, the claim
// release worker, host APIs) needs.
type Reader interface {
	VolumeReader
	PluginReader
	NodeReader
	AllocationReader
	PlacementReader
	CapacityReader
	SnapshotReader
	HealthReader
	Watcher
}

// Store is the server's source of truth for CSI volumes, plugins, nodes,
// allocations and claims: the reads, and Apply, the only way to write.
//
// Apply is called by one goroutine at a time per store in practice (the
// host's log applier); implementations must still be safe if it is not,
// and reads may run concurrently with it. Apply either applies the whole
// command or nothing: on error the store, including every table's index,
// is unchanged. index is the host's log index for the command; it must
// not be below the index of any earlier write (commands applied at the
// same index are allowed, for hosts that batch). Result.Changed is false
// when the command was valid but had nothing to change (a repeated
// claim); the table indexes then stay as they were.
//
// Ownership: Apply keeps nothing that cmd points to. A store copies
// what it keeps (MemStore) or encodes it, so the caller may change or
// reuse cmd, its maps and slices once Apply returns; Result.Claim and
// Result.Attachment are copies the caller owns.
//
// Errors match csi sentinels (errors.Is): csi.ErrInvalidID and
// csi.ErrInvalidRequest for malformed commands, and the sentinel named in
// each command's doc for refused ones. Commands are deterministic, so a
// refused command is refused the same way on every replica.
//
// MemStore is the in-memory implementation; package statetest checks any
// other implementation against the same contract.
type Store interface {
	Reader
	Apply(index uint64, cmd Command) (Result, error)
}

// Snapshotter is implemented by stores that can write their whole state
// to a stream and read it back (hashicorp/raft's FSM Snapshot and
// Restore). It is optional: a host whose own database persists the store
// does not need it. Find it with a type assertion.
//
// Snapshot may run concurrently with reads and writes and captures one
// consistent state. Restore replaces the whole state; on error the store
// is left exactly as it was, and a snapshot that is truncated, corrupted
// or of an unknown version is an error matching ErrBadSnapshot. Blocked
// Wait calls return after a restore. Snapshots contain volume secrets in clear:
// store and send them like the host's log.
type Snapshotter interface {
	Snapshot(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
}

// Result is what Apply reports about a command.
type Result struct {
	// Index is the log index the command was applied at.
	Index uint64
	// Changed is false when the command was valid but changed nothing
	// (a repeated claim, an allocation upserted unchanged).
	Changed bool
	// Claim is set for ClaimVolume: the claim as stored, with
	// ExternalNodeID filled in. The caller owns it.
	Claim *csi.Claim `json:",omitempty"`
	// Attachment is set for ClaimVolume: the attachment of the volume
	// to the claim's node as the claim left it (new and Attaching, new
	// and Attached when the plugin needs no controller, or the one the
	// claim joined). The caller owns it.
	Attachment *csi.Attachment `json:",omitempty"`
}

// Node is what one host node last reported about its CSI plugin
// instances (the fingerprints from UpsertNodePlugins). NodeReader
// returns a deep copy the caller owns.
type Node struct {
	ID string
	// Plugins are the instances, sorted by plugin ID then type. A
	// monolith instance is one entry that serves as both the controller
	// and the node instance of its plugin.
	Plugins []*csi.PluginInfo `json:",omitempty"`
	// SecretHash is the hash of the node's secret (HashNodeSecret) and
	// Address where its agent serves, both set by RegisterNode; empty
	// for a node that never registered. Do not show SecretHash in a
	// status output.
	SecretHash string `json:",omitempty"`
	Address    string `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
}

// ControllerInstance returns the node's controller (or monolith) instance
// of a plugin, or nil.
func (n *Node) ControllerInstance(pluginID string) *csi.PluginInfo {
	return n.instance(pluginID, csi.PluginTypeController)
}

// NodeInstance returns the node's node (or monolith) instance of a
// plugin, or nil.
func (n *Node) NodeInstance(pluginID string) *csi.PluginInfo {
	return n.instance(pluginID, csi.PluginTypeNode)
}

func (n *Node) instance(pluginID string, role csi.PluginType) *csi.PluginInfo {
	if n == nil {
		return nil
	}
	for _, p := range n.Plugins {
		if p.PluginID == pluginID && hasRole(p.Type, role) {
			return p
		}
	}
	return nil
}

// Copy returns a deep copy; nil stays nil.
func (n *Node) Copy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Plugins = slices.Clone(n.Plugins)
	for i, p := range c.Plugins {
		c.Plugins[i] = p.Copy()
	}
	return &c
}

func hasRole(t, role csi.PluginType) bool {
	if role == csi.PluginTypeController {
		return t.HasController()
	}
	return t.HasNode()
}
