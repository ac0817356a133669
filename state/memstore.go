package state

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
)

// Config configures a MemStore.
type Config struct {
	// Logger receives the store's few log lines (restores). nil means no
	// logging.
	Logger hclog.Logger
}

// MemStore is the in-memory Store, built on hashicorp/go-memdb. It is
// also a Snapshotter.
//
// Reads run concurrently with each other and with writes, each on a
// consistent snapshot of the whole state. Writes (Apply, Restore) are
// serialized.
//
// Ownership: MemStore never hands out an object it stores, and never
// keeps one it was given. Every read returns a deep copy the caller
// owns, and Apply copies what it keeps from a command. Inside, the
// stored objects are not copied between states: a read of an older
// state and the current one share every row the writes in between did
// not replace. So the store never changes a stored object in place,
// not even inside a write transaction: a write copies what it changes
// (a volume with editable, whose claims and attachments stay shared)
// and inserts the copy. Replace, never modify.
type MemStore struct {
	logger hclog.Logger

	// writeMu serializes Apply and Restore; last is guarded by it.
	writeMu sync.Mutex
	last    uint64

	gen atomic.Pointer[generation]
}

// generation is one database; Restore replaces it whole.
type generation struct {
	db *memdb.MemDB
	// replaced is closed when a restore replaces db, to wake Wait.
	replaced chan struct{}
	// marks holds each table's index (slot tableSlot(t)) and
	// PastClaimsIndex (slot pastSlot). Apply replaces a mark after the
	// commit of the write that moves it, so a reader that sees a mark
	// sees its write. They live beside the database rather than in it:
	// memdb rewrites a table's every index tree at each insert, and a
	// row per table written at each command cost a fifth of Apply.
	marks [pastSlot + 1]atomic.Pointer[mark]
}

// mark is one value of an index: the index, and a channel closed when a
// later write replaces the mark.
type mark struct {
	index   uint64
	changed chan struct{}
}

// numTables is the number of Tables; pastSlot, the slot of
// PastClaimsIndex in generation.marks, comes after the tables'.
const (
	numTables = 4
	pastSlot  = numTables
)

// tableSlot is table t's slot in generation.marks: its place in
// Tables().
func tableSlot(t Table) int {
	switch t {
	case TableVolumes:
		return 0
	case TablePlugins:
		return 1
	case TableNodes:
		return 2
	case TableAllocations:
		return 3
	}
	panic("state: no slot for table " + string(t))
}

// newGeneration wraps db, whose tables last changed at the indexes of
// tables (by tableSlot; missing ones at 0), and whose volumes with past
// claims at pastIndex.
func newGeneration(db *memdb.MemDB, tables map[Table]uint64, pastIndex uint64) *generation {
	g := &generation{db: db, replaced: make(chan struct{})}
	for _, t := range Tables() {
		g.marks[tableSlot(t)].Store(&mark{index: tables[t], changed: make(chan struct{})})
	}
	g.marks[pastSlot].Store(&mark{index: pastIndex, changed: make(chan struct{})})
	return g
}

// move replaces the mark in slot with index, waking its waiters.
func (g *generation) move(slot int, index uint64) {
	old := g.marks[slot].Swap(&mark{index: index, changed: make(chan struct{})})
	close(old.changed)
}

var (
	_ Store            = (*MemStore)(nil)
	_ Snapshotter      = (*MemStore)(nil)
	_ PastClaimWatcher = (*MemStore)(nil)
)

// NewMemStore returns an empty store. It starts no goroutine.
func NewMemStore(cfg Config) (*MemStore, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	db, err := newDB()
	if err != nil {
		return nil, err
	}
	s := &MemStore{logger: cfg.Logger}
	s.gen.Store(newGeneration(db, nil, 0))
	return s, nil
}

// quiet returns a database that holds what db holds and does not
// notify memdb watches when written: memdb gives that to its snapshots
// (so that their writes do not wake the primary's watchers), and the
// store watches nothing through memdb (Wait and WaitPastClaims use its
// own marks). A write then neither tracks the channel of every node it
// copies nor closes them at commit.
func quiet(db *memdb.MemDB) *memdb.MemDB { return db.Snapshot() }

func newDB() (*memdb.MemDB, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("state: build schema: %w", err)
	}
	return quiet(db), nil
}

func (s *MemStore) read() *memdb.Txn { return s.gen.Load().db.Txn(false) }

// Volume implements VolumeReader.
func (s *MemStore) Volume(namespace, id string) (*csi.Volume, error) {
	if err := validateVolumeRef(namespace, id); err != nil {
		return nil, err
	}
	txn := s.read()
	v, err := getVolume(txn, namespace, id)
	if err != nil {
		return nil, err
	}
	return viewVolume(txn, v, nil)
}

// Volumes implements VolumeReader.
func (s *MemStore) Volumes(namespace, idPrefix string) ([]*csi.Volume, error) {
	txn := s.read()
	if namespace == "" {
		return listVolumes(txn, iID, func(v *csi.Volume) bool { return strings.HasPrefix(v.ID, idPrefix) })
	}
	if err := csi.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	return listVolumes(txn, iID+"_prefix", nil, namespace, idPrefix)
}

// VolumesByPlugin implements VolumeReader.
func (s *MemStore) VolumesByPlugin(pluginID string) ([]*csi.Volume, error) {
	if err := csi.ValidatePluginID(pluginID); err != nil {
		return nil, err
	}
	txn := s.read()
	it, err := byRef(txn, tVolumes, refPlugin, pluginID)
	if err != nil {
		return nil, dbErr("list volumes", err)
	}
	return viewVolumes(txn, it, nil)
}

// VolumesByNode implements VolumeReader.
func (s *MemStore) VolumesByNode(nodeID string) ([]*csi.Volume, error) {
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return nil, err
	}
	txn := s.read()
	it, err := byRef(txn, tVolumes, refNode, nodeID)
	if err != nil {
		return nil, dbErr("list volumes", err)
	}
	vols, err := viewVolumes(txn, it, nil)
	if err != nil {
		return nil, err
	}
	// The index orders by (node, plugin, volume); the contract says
	// (namespace, ID).
	sortVolumes(vols)
	return vols, nil
}

// VolumesWithPastClaims implements VolumeReader.
func (s *MemStore) VolumesWithPastClaims() ([]*csi.Volume, error) {
	txn := s.read()
	it, err := byPast(txn)
	if err != nil {
		return nil, dbErr("list volumes with past claims", err)
	}
	return viewVolumes(txn, it, nil)
}

// PastClaimVolumeIDs implements VolumeReader.
func (s *MemStore) PastClaimVolumeIDs() ([]VolumeStamp, error) {
	it, err := s.read().Get(tPast, iID)
	if err != nil {
		return nil, dbErr("list volumes with past claims", err)
	}
	var out []VolumeStamp
	for raw := it.Next(); raw != nil; raw = it.Next() {
		// Rows are never changed in place, and strings are immutable:
		// the stamp can share the row's strings.
		p := raw.(*pastRow)
		out = append(out, VolumeStamp{VolumeKey: VolumeKey{Namespace: p.Namespace, ID: p.ID}, ModifyIndex: p.ModifyIndex})
	}
	return out, nil
}

// Plugin implements PluginReader.
func (s *MemStore) Plugin(id string) (*csi.Plugin, error) {
	if err := csi.ValidatePluginID(id); err != nil {
		return nil, err
	}
	txn := s.read()
	p, err := getPlugin(txn, id)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, pluginNotFound(id)
	}
	return viewPlugin(txn, p)
}

// Plugins implements PluginReader.
func (s *MemStore) Plugins() ([]*csi.Plugin, error) {
	txn := s.read()
	it, err := txn.Get(tPlugins, iID)
	if err != nil {
		return nil, dbErr("list plugins", err)
	}
	var out []*csi.Plugin
	for raw := it.Next(); raw != nil; raw = it.Next() {
		p, err := viewPlugin(txn, raw.(*csi.Plugin))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// HealthyControllers implements PluginReader.
func (s *MemStore) HealthyControllers(pluginID string) (map[string]*csi.PluginInfo, error) {
	if err := csi.ValidatePluginID(pluginID); err != nil {
		return nil, err
	}
	txn := s.read()
	p, err := getPlugin(txn, pluginID)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, pluginNotFound(pluginID)
	}
	out := map[string]*csi.PluginInfo{}
	err = eachInstance(txn, pluginID, csi.PluginTypeController, func(in *instance) error {
		if in.Info.Healthy {
			out[in.NodeID] = in.Info.Copy()
		}
		return nil
	})
	return out, err
}

// Node implements NodeReader.
func (s *MemStore) Node(id string) (*Node, error) {
	if err := csi.ValidateNodeID(id); err != nil {
		return nil, err
	}
	n, err := getNode(s.read(), id)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("%w: node %s has reported no plugins", csi.ErrNodeNotFound, id)
	}
	return n.Copy(), nil
}

// Allocation implements AllocationReader.
func (s *MemStore) Allocation(id string) (*csi.Allocation, error) {
	if err := csi.ValidateAllocationID(id); err != nil {
		return nil, err
	}
	a, err := getAllocation(s.read(), id)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, allocationNotFound(id)
	}
	return a.Copy(), nil
}

// AllocationsByNode implements AllocationReader.
func (s *MemStore) AllocationsByNode(nodeID string) ([]*csi.Allocation, error) {
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return nil, err
	}
	it, err := byRef(s.read(), tAllocations, refOnNode, nodeID)
	if err != nil {
		return nil, dbErr("list allocations of node "+nodeID, err)
	}
	var out []*csi.Allocation
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*csi.Allocation).Copy())
	}
	if err := it.Err(); err != nil {
		return nil, dbErr("list allocations of node "+nodeID, err)
	}
	return out, nil
}

// --- lookups shared by reads and writes ---

func dbErr(what string, err error) error {
	return fmt.Errorf("state: %s: %w", what, err)
}

func getOne[T any](txn *memdb.Txn, table string, args ...any) (T, error) {
	var zero T
	raw, err := txn.First(table, iID, args...)
	if err != nil {
		return zero, dbErr("read "+table, err)
	}
	if raw == nil {
		return zero, nil
	}
	return raw.(T), nil
}

// getVolume returns the stored volume (not a copy) or ErrVolumeNotFound.
func getVolume(txn *memdb.Txn, ns, id string) (*csi.Volume, error) {
	v, err := getOne[*csi.Volume](txn, tVolumes, ns, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, volumeNotFound(ns, id)
	}
	return v, nil
}

// volumeNotFound is the error for a volume that is not registered.
func volumeNotFound(ns, id string) error {
	return fmt.Errorf("%w: volume %s is not registered in namespace %s; register it first",
		csi.ErrVolumeNotFound, id, ns)
}

func getPlugin(txn *memdb.Txn, id string) (*csi.Plugin, error) {
	return getOne[*csi.Plugin](txn, tPlugins, id)
}

func getNode(txn *memdb.Txn, id string) (*Node, error) {
	return getOne[*Node](txn, tNodes, id)
}

func getAllocation(txn *memdb.Txn, id string) (*csi.Allocation, error) {
	return getOne[*csi.Allocation](txn, tAllocations, id)
}

func getInstance(txn *memdb.Txn, pluginID string, role csi.PluginType, nodeID string) (*instance, error) {
	return getOne[*instance](txn, tInstances, pluginID, string(role), nodeID)
}

func pluginNotFound(id string) error {
	return fmt.Errorf("%w: plugin %s has no running instance; start its plugin tasks and wait for a healthy fingerprint",
		csi.ErrPluginNotFound, id)
}

func allocationNotFound(id string) error {
	return fmt.Errorf("%w: allocation %s is unknown; upsert it before claiming volumes for it",
		csi.ErrAllocationNotFound, id)
}

// eachInstance calls fn for every instance of a plugin in a role, or in
// both roles when role is "".
func eachInstance(txn *memdb.Txn, pluginID string, role csi.PluginType, fn func(*instance) error) error {
	args := []any{pluginID, ""}
	if role != "" {
		args = []any{pluginID, string(role), ""}
	}
	it, err := txn.Get(tInstances, iID+"_prefix", args...)
	if err != nil {
		return dbErr("list plugin instances", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if err := fn(raw.(*instance)); err != nil {
			return err
		}
	}
	return nil
}

func hasInstances(txn *memdb.Txn, pluginID string) (bool, error) {
	raw, err := txn.First(tInstances, iID+"_prefix", pluginID, "")
	if err != nil {
		return false, dbErr("read plugin instances", err)
	}
	return raw != nil, nil
}

func listVolumes(txn *memdb.Txn, index string, keep func(*csi.Volume) bool, args ...any) ([]*csi.Volume, error) {
	it, err := txn.Get(tVolumes, index, args...)
	if err != nil {
		return nil, dbErr("list volumes", err)
	}
	return viewVolumes(txn, it, keep)
}

// rows is what viewVolumes reads: a memdb iterator, or a refIter, which
// also has Err.
type rows interface{ Next() any }

// viewVolumes returns the views of the volumes it yields that keep
// keeps (all for a nil keep).
func viewVolumes(txn *memdb.Txn, it rows, keep func(*csi.Volume) bool) ([]*csi.Volume, error) {
	plugins := map[string]*csi.Plugin{}
	var out []*csi.Volume
	for raw := it.Next(); raw != nil; raw = it.Next() {
		v := raw.(*csi.Volume)
		if keep != nil && !keep(v) {
			continue
		}
		view, err := viewVolume(txn, v, plugins)
		if err != nil {
			return nil, err
		}
		out = append(out, view)
	}
	if r, ok := it.(interface{ Err() error }); ok && r.Err() != nil {
		return nil, dbErr("list volumes", r.Err())
	}
	return out, nil
}

func sortVolumes(vols []*csi.Volume) {
	slices.SortFunc(vols, func(a, b *csi.Volume) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// viewVolume returns a copy of a stored volume with its plugin's fields
// filled in. cache, if not nil, remembers plugins across a list.
func viewVolume(txn *memdb.Txn, v *csi.Volume, cache map[string]*csi.Plugin) (*csi.Volume, error) {
	p, ok := cache[v.PluginID]
	if !ok {
		var err error
		if p, err = getPlugin(txn, v.PluginID); err != nil {
			return nil, err
		}
		if cache != nil {
			cache[v.PluginID] = p
		}
	}
	out := v.Copy()
	if p != nil {
		if p.Provider != "" {
			out.Provider = p.Provider
		}
		out.ControllerRequired = p.ControllerRequired
		out.Schedulable = p.Schedulable()
		out.ControllersHealthy = p.ControllersHealthy
		out.ControllersExpected = p.ControllersExpected
		out.NodesHealthy = p.NodesHealthy
		out.NodesExpected = p.NodesExpected
	}
	return out, nil
}

// viewPlugin assembles a plugin from its row, its instances and the
// running allocations that run it.
func viewPlugin(txn *memdb.Txn, row *csi.Plugin) (*csi.Plugin, error) {
	p := row.Copy()
	err := eachInstance(txn, row.ID, "", func(in *instance) error {
		m := &p.Nodes
		if in.Role == csi.PluginTypeController {
			m = &p.Controllers
		}
		if *m == nil {
			*m = map[string]*csi.PluginInfo{}
		}
		(*m)[in.NodeID] = in.Info.Copy()
		return nil
	})
	if err != nil {
		return nil, err
	}
	it, err := byRef(txn, tAllocations, refRunning, row.ID)
	if err != nil {
		return nil, dbErr("list plugin allocations", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		a := raw.(*csi.Allocation)
		for _, ap := range a.Plugins {
			if ap.PluginID == row.ID {
				p.Allocations = append(p.Allocations, csi.PluginAllocation{
					AllocationID: a.ID, NodeID: a.NodeID, JobID: a.JobID, TaskGroup: a.TaskGroup, Type: ap.Type,
				})
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, dbErr("list plugin allocations", err)
	}
	// The keys yield allocation order; the contract adds the type.
	slices.SortStableFunc(p.Allocations, func(a, b csi.PluginAllocation) int {
		if c := strings.Compare(a.AllocationID, b.AllocationID); c != 0 {
			return c
		}
		return strings.Compare(string(a.Type), string(b.Type))
	})
	return p, nil
}
