package state

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-hclog"
)

// Config configures a MemStore.
type Config struct {
	// Logger receives the store's few log lines (restores). nil means no
	// logging.
	Logger hclog.Logger
}

// MemStore is the in-memory Store. It is also a Snapshotter.
//
// Its state is immutable: tables and indexes are copy-on-write hash
// tries and B-trees, and a write builds the next state beside the
// current one, sharing what it did not change, then publishes it with
// one atomic store. Reads run concurrently with each other and with
// writes, each on the state published when it began, without locks.
// Writes (Apply, Restore) are serialized. Stored objects are never
// changed in place: a write copies what it changes and stores the copy,
// and every read returns a copy the caller owns.
type MemStore struct {
	logger hclog.Logger

	// writeMu serializes Apply and Restore; last is guarded by it.
	writeMu sync.Mutex
	last    uint64

	root atomic.Pointer[db]
}

var (
	_ Store       = (*MemStore)(nil)
	_ Snapshotter = (*MemStore)(nil)
)

// NewMemStore returns an empty store. It starts no goroutine.
func NewMemStore(cfg Config) (*MemStore, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &MemStore{logger: cfg.Logger}
	s.root.Store(emptyDB())
	return s, nil
}

func (s *MemStore) read() *db { return s.root.Load() }

// Volume implements VolumeReader.
func (s *MemStore) Volume(namespace, id string) (*csi.Volume, error) {
	if err := validateVolumeRef(namespace, id); err != nil {
		return nil, err
	}
	d := s.read()
	r, err := d.getVolume(namespace, id)
	if err != nil {
		return nil, err
	}
	return d.viewVolumes([]*volRow{r})[0], nil
}

// Volumes implements VolumeReader.
func (s *MemStore) Volumes(namespace, idPrefix string) ([]*csi.Volume, error) {
	d := s.read()
	var rows []*volRow
	if namespace == "" {
		d.volumes.scan("", func(r *volRow) bool {
			if strings.HasPrefix(r.v.ID, idPrefix) {
				rows = append(rows, r)
			}
			return true
		})
	} else {
		if err := csi.ValidateNamespace(namespace); err != nil {
			return nil, err
		}
		d.volumes.scan(key1(namespace)+idPrefix, func(r *volRow) bool {
			rows = append(rows, r)
			return true
		})
	}
	if rows == nil {
		return nil, nil
	}
	return d.viewVolumes(rows), nil
}

// VolumesByPlugin implements VolumeReader.
func (s *MemStore) VolumesByPlugin(pluginID string) ([]*csi.Volume, error) {
	if err := csi.ValidatePluginID(pluginID); err != nil {
		return nil, err
	}
	return s.read().volumesBy(volByPlugin, pluginID), nil
}

// VolumesByNode implements VolumeReader.
func (s *MemStore) VolumesByNode(nodeID string) ([]*csi.Volume, error) {
	if err := csi.ValidateNodeID(nodeID); err != nil {
		return nil, err
	}
	vols := s.read().volumesBy(volByNode, nodeID)
	// The index orders by (node, plugin, volume); the contract says
	// (namespace, ID).
	sortVolumes(vols)
	return vols, nil
}

// VolumesWithPastClaims implements VolumeReader.
func (s *MemStore) VolumesWithPastClaims() ([]*csi.Volume, error) {
	return s.read().volumesBy(volPast, ""), nil
}

// PastClaimVolumeIDs implements VolumeReader.
func (s *MemStore) PastClaimVolumeIDs() ([]VolumeStamp, error) {
	d := s.read()
	var out []VolumeStamp
	d.volumes.lookup(volumeSpec, volPast, "", "", func(r *volRow) bool {
		// Stored volumes are never changed in place, and strings are
		// immutable: the stamp can share the stored ID strings.
		out = append(out, VolumeStamp{VolumeKey: VolumeKey{Namespace: r.v.Namespace, ID: r.v.ID}, ModifyIndex: r.v.ModifyIndex})
		return true
	})
	return out, nil
}

// Plugin implements PluginReader.
func (s *MemStore) Plugin(id string) (*csi.Plugin, error) {
	if err := csi.ValidatePluginID(id); err != nil {
		return nil, err
	}
	d := s.read()
	p := d.plugin(id)
	if p == nil {
		return nil, pluginNotFound(id)
	}
	return d.viewPlugin(p), nil
}

// Plugins implements PluginReader.
func (s *MemStore) Plugins() ([]*csi.Plugin, error) {
	d := s.read()
	var out []*csi.Plugin
	d.plugins.scan("", func(p *csi.Plugin) bool {
		out = append(out, d.viewPlugin(p))
		return true
	})
	return out, nil
}

// HealthyControllers implements PluginReader.
func (s *MemStore) HealthyControllers(pluginID string) (map[string]*csi.PluginInfo, error) {
	if err := csi.ValidatePluginID(pluginID); err != nil {
		return nil, err
	}
	d := s.read()
	if d.plugin(pluginID) == nil {
		return nil, pluginNotFound(pluginID)
	}
	out := map[string]*csi.PluginInfo{}
	d.eachInstance(pluginID, csi.PluginTypeController, func(in *instance) {
		if in.Info.Healthy {
			out[in.NodeID] = in.Info.Copy()
		}
	})
	return out, nil
}

// Node implements NodeReader.
func (s *MemStore) Node(id string) (*Node, error) {
	if err := csi.ValidateNodeID(id); err != nil {
		return nil, err
	}
	n := s.read().node(id)
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
	a := s.read().allocation(id)
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
	var out []*csi.Allocation
	s.read().allocs.lookup(allocationSpec, allocByNode, nodeID, "", func(a *csi.Allocation) bool {
		out = append(out, a.Copy())
		return true
	})
	return out, nil
}

// --- lookups shared by reads and writes ---

func get[T comparable](t *table[T], pk string) T {
	row, _ := t.get(pk)
	return row
}

// getVolume returns the stored volume row (not a copy) or
// ErrVolumeNotFound.
func (d *db) getVolume(ns, id string) (*volRow, error) {
	r := get(&d.volumes, volumeKey(ns, id))
	if r == nil {
		return nil, fmt.Errorf("%w: volume %s is not registered in namespace %s; register it first",
			csi.ErrVolumeNotFound, id, ns)
	}
	return r, nil
}

// The stored row (not a copy), or nil.
func (d *db) plugin(id string) *csi.Plugin         { return get(&d.plugins, id) }
func (d *db) node(id string) *Node                 { return get(&d.nodes, id) }
func (d *db) allocation(id string) *csi.Allocation { return get(&d.allocs, id) }

func (d *db) instance(pluginID string, role csi.PluginType, nodeID string) *instance {
	return get(&d.instances, instanceKey(pluginID, role, nodeID))
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
// both roles when role is "", in (role, node) order.
func (d *db) eachInstance(pluginID string, role csi.PluginType, fn func(*instance)) {
	p := key1(pluginID)
	if role != "" {
		p = key2(pluginID, string(role))
	}
	d.instances.scan(p, func(in *instance) bool {
		fn(in)
		return true
	})
}

func (d *db) hasInstances(pluginID string) bool {
	_, ok := d.instances.first(key1(pluginID))
	return ok
}

// volumesBy returns copies of the volumes of one group of a volume
// index, in index order.
func (d *db) volumesBy(index int, group string) []*csi.Volume {
	var rows []*volRow
	d.volumes.lookup(volumeSpec, index, group, "", func(r *volRow) bool {
		rows = append(rows, r)
		return true
	})
	if rows == nil {
		return nil
	}
	return d.viewVolumes(rows)
}

func sortVolumes(vols []*csi.Volume) {
	slices.SortFunc(vols, func(a, b *csi.Volume) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// viewPlugin assembles a plugin from its row, its instances and the
// running allocations that run it.
func (d *db) viewPlugin(row *csi.Plugin) *csi.Plugin {
	p := row.Copy()
	d.eachInstance(row.ID, "", func(in *instance) {
		m := &p.Nodes
		if in.Role == csi.PluginTypeController {
			m = &p.Controllers
		}
		if *m == nil {
			*m = map[string]*csi.PluginInfo{}
		}
		(*m)[in.NodeID] = in.Info.Copy()
	})
	d.allocs.lookup(allocationSpec, allocByPlugin, row.ID, "", func(a *csi.Allocation) bool {
		for _, ap := range a.Plugins {
			if ap.PluginID == row.ID {
				p.Allocations = append(p.Allocations, csi.PluginAllocation{
					AllocationID: a.ID, NodeID: a.NodeID, JobID: a.JobID, TaskGroup: a.TaskGroup, Type: ap.Type,
				})
			}
		}
		return true
	})
	// The index yields allocation order; the contract adds the type.
	slices.SortStableFunc(p.Allocations, func(a, b csi.PluginAllocation) int {
		if c := strings.Compare(a.AllocationID, b.AllocationID); c != 0 {
			return c
		}
		return strings.Compare(string(a.Type), string(b.Type))
	})
	return p
}
