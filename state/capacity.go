// capacity.go owns what controllers report about free storage: the
// capacity records of each plugin (GetCapacity answers per node topology
// and parameters class), the SetCapacity command that replaces them, and
// the Capacity read.
//
// Rules a reader must know:
//
//   - A plugin's records are one row (tCapacity), replaced whole by
//     SetCapacity: a refresh pass is one write, never one per topology.
//   - The rows belong to the plugins table: a change raises
//     TablePlugins' index, and a plugin deleted (left without instances)
//     takes its row with it (finishPlugin).
//   - A SetCapacity that reports what is stored, SeenAt aside, writes
//     nothing and reports Changed false, so a refresher that asks on an
//     interval wakes no blocking query while nothing moves.
//   - Snapshots of version 2 written before capacity existed have no
//     capacity rows and restore with none.

package state

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// KindSetCapacity tags SetCapacity.
const KindSetCapacity Kind = "set-capacity"

// tCapacity holds one capacityRow per plugin that has capacity records.
const tCapacity = "capacity"

// Capacity is what a plugin's controller reported with GetCapacity for
// volumes of one parameters class accessible from one node topology.
// CapacityReader returns copies the caller owns.
type Capacity struct {
	// Topology is the node topology the controller was asked about: one
	// of the accessible topologies of the plugin's node instances. Nil
	// when the plugin's nodes report none (the request had no
	// accessible_topology).
	Topology *csi.Topology `json:",omitempty"`
	// Class is the parameters class, ClassOf(parameters) of the
	// parameters the controller was asked about: "" for none.
	Class string `json:",omitempty"`
	// Available is the storage, in bytes, left for such volumes.
	Available int64
	// MaximumVolumeSize and MinimumVolumeSize bound one volume's size
	// when the plugin reports them; nil when it does not.
	MaximumVolumeSize *int64 `json:",omitempty"`
	MinimumVolumeSize *int64 `json:",omitempty"`
	// SeenAt is when this value was first reported: a report of the
	// same value later keeps it (UTC).
	SeenAt time.Time
}

// Key returns the record's identity within its plugin: the canonical
// key of its topology (TopologyKey), a NUL, and its class.
func (c *Capacity) Key() string { return TopologyKey(c.Topology) + "\x00" + c.Class }

// TopologyKey is the canonical string of a topology's segments: the
// segments as a JSON object with sorted keys, "" for a nil or empty
// topology. Two topologies have the same key exactly when they are
// Equal.
func TopologyKey(t *csi.Topology) string {
	if t == nil || len(t.Segments) == 0 {
		return ""
	}
	return canonical(t.Segments)
}

// ClassOf is the canonical name of a parameters class: the parameters
// as a JSON object with sorted keys, "" for none. A refresher records
// capacity under ClassOf(parameters), and a host asks for the room of a
// volume to be created under ClassOf of its CreateVolume parameters.
func ClassOf(parameters map[string]string) string {
	if len(parameters) == 0 {
		return ""
	}
	return canonical(parameters)
}

func canonical(m map[string]string) string {
	b, err := json.Marshal(m) // encoding/json sorts map keys
	if err != nil {
		panic("state: encode a string map: " + err.Error()) // cannot fail for map[string]string
	}
	return string(b)
}

func (c *Capacity) copy() Capacity {
	o := *c
	o.Topology = c.Topology.Copy()
	if c.MaximumVolumeSize != nil {
		o.MaximumVolumeSize = new(*c.MaximumVolumeSize)
	}
	if c.MinimumVolumeSize != nil {
		o.MinimumVolumeSize = new(*c.MinimumVolumeSize)
	}
	return o
}

// sameValue reports whether c and o are the same report, SeenAt aside.
func (c *Capacity) sameValue(o *Capacity) bool {
	eq := func(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return c.Key() == o.Key() && c.Available == o.Available &&
		eq(c.MaximumVolumeSize, o.MaximumVolumeSize) && eq(c.MinimumVolumeSize, o.MinimumVolumeSize)
}

// capacityRow is a plugin's capacity records, sorted by Key.
type capacityRow struct {
	PluginID    string
	Records     []Capacity
	ModifyIndex uint64
}

func capacityTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tCapacity, Indexes: map[string]*memdb.IndexSchema{
		iID: {Name: iID, Unique: true, Indexer: single(1, func(r *capacityRow) []string { return []string{r.PluginID} })},
	}}
}

// SetCapacity replaces a plugin's capacity records with Records, one per
// (topology, class); an empty list removes them. The plugin must exist
// (csi.ErrPluginNotFound). Two records with the same topology and class,
// or a negative size, are refused with csi.ErrInvalidRequest. Records
// equal to the stored ones apart from SeenAt keep the stored SeenAt;
// when every record is equal the command changes nothing (Result.Changed
// false).
type SetCapacity struct {
	PluginID string
	Records  []Capacity
}

// Kind implements Command.
func (SetCapacity) Kind() Kind { return KindSetCapacity }

func (c SetCapacity) apply(w *writer) error {
	if err := csi.ValidatePluginID(c.PluginID); err != nil {
		return err
	}
	p, err := getPlugin(w.txn, c.PluginID)
	if err != nil {
		return err
	}
	if p == nil {
		return pluginNotFound(c.PluginID)
	}
	recs := make([]Capacity, len(c.Records))
	for i := range c.Records {
		r := c.Records[i].copy()
		for _, n := range []struct {
			name string
			v    *int64
		}{{"Available", &r.Available}, {"MaximumVolumeSize", r.MaximumVolumeSize}, {"MinimumVolumeSize", r.MinimumVolumeSize}} {
			if n.v != nil && *n.v < 0 {
				return fmt.Errorf("%w: capacity of plugin %s for topology {%s}: %s is %d; sizes are not negative",
					csi.ErrInvalidRequest, c.PluginID, r.Topology, n.name, *n.v)
			}
		}
		if r.Topology != nil {
			r.Topology.Segments = nilIfEmpty(r.Topology.Segments)
			if r.Topology.Segments == nil {
				r.Topology = nil
			}
		}
		r.SeenAt = r.SeenAt.UTC()
		recs[i] = r
	}
	slices.SortFunc(recs, func(a, b Capacity) int { return cmp.Compare(a.Key(), b.Key()) })
	for i := 1; i < len(recs); i++ {
		if recs[i].Key() == recs[i-1].Key() {
			return fmt.Errorf("%w: capacity of plugin %s lists topology {%s} and class %q twice; send one record per topology and class",
				csi.ErrInvalidRequest, c.PluginID, recs[i].Topology, recs[i].Class)
		}
	}
	old, err := getOne[*capacityRow](w.txn, tCapacity, c.PluginID)
	if err != nil {
		return err
	}
	var oldRecs []Capacity
	if old != nil {
		oldRecs = old.Records
	}
	same := len(oldRecs) == len(recs)
	for i := range recs {
		j, found := slices.BinarySearchFunc(oldRecs, recs[i].Key(), func(o Capacity, k string) int { return cmp.Compare(o.Key(), k) })
		if found && oldRecs[j].sameValue(&recs[i]) {
			recs[i].SeenAt = oldRecs[j].SeenAt
			continue
		}
		same = false
	}
	switch {
	case same:
		return nil
	case len(recs) == 0:
		return w.delete(tCapacity, old)
	}
	return w.insert(tCapacity, &capacityRow{PluginID: c.PluginID, Records: recs, ModifyIndex: w.index})
}

// dropCapacity removes the capacity records of a plugin being deleted.
func (w *writer) dropCapacity(pluginID string) error {
	old, err := getOne[*capacityRow](w.txn, tCapacity, pluginID)
	if err != nil || old == nil {
		return err
	}
	return w.delete(tCapacity, old)
}

// CapacityReader reads the capacity records. The contract of
// VolumeReader applies, ownership included.
type CapacityReader interface {
	// Capacity returns a plugin's capacity records, sorted by topology
	// key then class, copies the caller owns. A plugin without records
	// (its controller does not advertise GET_CAPACITY, or no refresh has
	// run yet) has none, which is not an error; an unknown plugin
	// matches csi.ErrPluginNotFound.
	Capacity(pluginID string) ([]Capacity, error)
}

// Capacity implements CapacityReader.
func (s *MemStore) Capacity(pluginID string) ([]Capacity, error) {
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
	row, err := getOne[*capacityRow](txn, tCapacity, pluginID)
	if err != nil || row == nil {
		return nil, err
	}
	out := make([]Capacity, len(row.Records))
	for i := range row.Records {
		out[i] = row.Records[i].copy()
	}
	return out, nil
}

// checkCapacityRow refuses a restored row the store would not write.
func checkCapacityRow(r *capacityRow) error {
	if err := csi.ValidatePluginID(r.PluginID); err != nil {
		return err
	}
	if len(r.Records) == 0 {
		return fmt.Errorf("capacity of plugin %s: no records", r.PluginID)
	}
	keys := make([]string, len(r.Records))
	for i := range r.Records {
		keys[i] = r.Records[i].Key()
	}
	if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
		return fmt.Errorf("capacity of plugin %s: records not sorted by topology and class, or repeated", r.PluginID)
	}
	return nil
}
