// health.go owns what the health monitor learns about volumes: the
// health records (a controller's condition, whether the backend still
// has the volume, each node's condition and usage), the SetVolumeHealth
// command that writes them, and the Health reads. Its drift commands,
// which change attachment records, are in health_drift.go.
//
// Rules a reader must know:
//
//   - A volume's record is one row (tHealth) beside the volume's, not in
//     it: a pass that writes health does not rewrite volume rows, and a
//     claim never conflicts with a health write. A change raises
//     TableVolumes' index; deleting the volume takes the row with it
//     (deleteVolume).
//   - Reports equal to the stored values keep the stored SeenAt and
//     write nothing (Result.Changed false), so a monitor that asks on an
//     interval wakes no blocking query while nothing moves.
//   - A record left with nothing in it (no condition, not missing, no
//     node) is removed.
//   - Snapshots written before health existed have no health rows and
//     restore with none.

package state

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// KindSetVolumeHealth tags SetVolumeHealth.
const KindSetVolumeHealth Kind = "set-volume-health"

// tHealth holds one VolumeHealth per volume that has a health record.
const tHealth = "health"

// Condition is a volume's health as a plugin reported it (the volume
// condition of ControllerGetVolume, ListVolumes or NodeGetVolumeStats).
type Condition struct {
	// Abnormal is true when the plugin says the volume is not healthy.
	Abnormal bool
	// Message is the plugin's description; it is shown to operators.
	Message string `json:",omitempty"`
}

// Usage is a volume's use on a node (NodeGetVolumeStats). A zero total
// means the plugin did not report that unit.
type Usage struct {
	BytesUsed, BytesTotal, BytesAvailable    int64 `json:",omitempty"`
	InodesUsed, InodesTotal, InodesAvailable int64 `json:",omitempty"`
}

// NodeHealth is what one node's plugin reported for a volume staged or
// published there.
type NodeHealth struct {
	// Condition is nil when the node plugin reports none.
	Condition *Condition `json:",omitempty"`
	Usage     Usage
	// SeenAt is when these values were first reported (UTC).
	SeenAt time.Time
}

// VolumeHealth is the health record of one volume. HealthReader returns
// copies the caller owns.
type VolumeHealth struct {
	Namespace string
	VolumeID  string
	// Condition is the controller's; nil when it reports none.
	Condition *Condition `json:",omitempty"`
	// Missing is set when the controller no longer has the volume
	// (ControllerGetVolume answered NotFound, or a full ListVolumes did
	// not list it).
	Missing bool `json:",omitempty"`
	// SeenAt is when Condition and Missing took their values (UTC).
	SeenAt time.Time `json:",omitzero"`
	// Nodes are the node reports, by node ID.
	Nodes       map[string]*NodeHealth `json:",omitempty"`
	ModifyIndex uint64
}

// Abnormal reports whether the controller or any node says the volume
// is not healthy, or the backend has lost it.
func (h *VolumeHealth) Abnormal() bool {
	if h.Missing || (h.Condition != nil && h.Condition.Abnormal) {
		return true
	}
	for _, n := range h.Nodes {
		if n.Condition != nil && n.Condition.Abnormal {
			return true
		}
	}
	return false
}

func (h *VolumeHealth) copy() *VolumeHealth {
	c := *h
	if h.Condition != nil {
		c.Condition = new(*h.Condition)
	}
	if h.Nodes != nil {
		c.Nodes = make(map[string]*NodeHealth, len(h.Nodes))
		for k, n := range h.Nodes {
			nn := *n
			if n.Condition != nil {
				nn.Condition = new(*n.Condition)
			}
			c.Nodes[k] = &nn
		}
	}
	return &c
}

func healthTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tHealth, Indexes: map[string]*memdb.IndexSchema{
		iID: {Name: iID, Unique: true, Indexer: single(2, func(h *VolumeHealth) []string { return []string{h.Namespace, h.VolumeID} })},
	}}
}

// HealthReport is one observation of a volume, by its controller
// (NodeID empty) or by the node plugin on NodeID.
type HealthReport struct {
	Namespace string
	VolumeID  string
	// NodeID is empty for a controller report. A node report with no
	// Condition and no Usage removes the node's entry (the volume is no
	// longer staged or published there).
	NodeID    string     `json:",omitempty"`
	Condition *Condition `json:",omitempty"`
	// Missing is a controller report's: the backend no longer has the
	// volume.
	Missing bool  `json:",omitempty"`
	Usage   Usage `json:",omitzero"`
	// At is when the report was made; it becomes SeenAt when a value
	// changes.
	At time.Time
}

// SetVolumeHealth writes the reports of a monitor pass, in order. A
// controller report replaces the volume's Condition and Missing; a node
// report replaces that node's entry. A report equal to the stored values
// changes nothing, so a pass over healthy volumes writes nothing
// (Result.Changed false). A report for a volume not (or no longer)
// registered is skipped, since the volume was deleted meanwhile; a bad
// ID, a node report that says Missing, or a negative usage is refused
// with csi.ErrInvalidRequest, and refuses the whole command.
type SetVolumeHealth struct {
	Reports []HealthReport
}

// Kind implements Command.
func (SetVolumeHealth) Kind() Kind { return KindSetVolumeHealth }

func (c SetVolumeHealth) apply(w *writer) error {
	for i := range c.Reports {
		if err := w.healthReport(&c.Reports[i]); err != nil {
			return fmt.Errorf("health report %d: %w", i, err)
		}
	}
	return nil
}

func checkReport(r *HealthReport) error {
	if err := validateVolumeRef(r.Namespace, r.VolumeID); err != nil {
		return err
	}
	if r.NodeID != "" {
		if err := csi.ValidateNodeID(r.NodeID); err != nil {
			return err
		}
		if r.Missing {
			return fmt.Errorf("%w: node %s reports volume %s missing; only its controller can", csi.ErrInvalidRequest, r.NodeID, volName(r.Namespace, r.VolumeID))
		}
	}
	u := r.Usage
	if min(u.BytesUsed, u.BytesTotal, u.BytesAvailable, u.InodesUsed, u.InodesTotal, u.InodesAvailable) < 0 {
		return fmt.Errorf("%w: usage of volume %s is negative; report 0 for what the plugin does not know", csi.ErrInvalidRequest, volName(r.Namespace, r.VolumeID))
	}
	return nil
}

func (w *writer) healthReport(r *HealthReport) error {
	if err := checkReport(r); err != nil {
		return err
	}
	v, err := w.volume(r.Namespace, r.VolumeID)
	if err != nil || v == nil {
		return err
	}
	old, err := getOne[*VolumeHealth](w.txn, tHealth, r.Namespace, r.VolumeID)
	if err != nil {
		return err
	}
	h := &VolumeHealth{Namespace: r.Namespace, VolumeID: r.VolumeID}
	if old != nil {
		h = old.copy()
	}
	at := r.At.UTC()
	if r.NodeID == "" {
		if sameCondition(h.Condition, r.Condition) && h.Missing == r.Missing {
			return nil
		}
		h.Condition, h.Missing, h.SeenAt = copyCondition(r.Condition), r.Missing, at
	} else {
		n := h.Nodes[r.NodeID]
		gone := r.Condition == nil && r.Usage == (Usage{})
		switch {
		case gone && n == nil:
			return nil
		case gone:
			delete(h.Nodes, r.NodeID)
		case n != nil && sameCondition(n.Condition, r.Condition) && n.Usage == r.Usage:
			return nil
		default:
			if h.Nodes == nil {
				h.Nodes = map[string]*NodeHealth{}
			}
			h.Nodes[r.NodeID] = &NodeHealth{Condition: copyCondition(r.Condition), Usage: r.Usage, SeenAt: at}
		}
	}
	h.Nodes = nilIfEmpty(h.Nodes)
	if h.Condition == nil && !h.Missing && h.Nodes == nil {
		if old == nil {
			return nil
		}
		return w.delete(tHealth, old)
	}
	h.ModifyIndex = w.index
	return w.insert(tHealth, h)
}

func sameCondition(a, b *Condition) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func copyCondition(c *Condition) *Condition {
	if c == nil {
		return nil
	}
	return new(*c)
}

// dropHealth removes the health record of a volume being deleted.
func (w *writer) dropHealth(ns, id string) error {
	old, err := getOne[*VolumeHealth](w.txn, tHealth, ns, id)
	if err != nil || old == nil {
		return err
	}
	return w.delete(tHealth, old)
}

// HealthReader reads the health records. The contract of VolumeReader
// applies, ownership included.
type HealthReader interface {
	// Health returns a volume's health record, a copy the caller owns,
	// or nil when it has none (nothing reported, or all healthy and
	// nothing kept). An unknown volume matches csi.ErrVolumeNotFound.
	Health(namespace, volumeID string) (*VolumeHealth, error)
	// Healths returns every health record, sorted by namespace and
	// volume ID, copies the caller owns.
	Healths() ([]*VolumeHealth, error)
}

// Health implements HealthReader.
func (s *MemStore) Health(namespace, volumeID string) (*VolumeHealth, error) {
	if err := validateVolumeRef(namespace, volumeID); err != nil {
		return nil, err
	}
	txn := s.read()
	v, err := getOne[*csi.Volume](txn, tVolumes, namespace, volumeID)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, volumeNotFound(namespace, volumeID)
	}
	h, err := getOne[*VolumeHealth](txn, tHealth, namespace, volumeID)
	if err != nil || h == nil {
		return nil, err
	}
	return h.copy(), nil
}

// Healths implements HealthReader.
func (s *MemStore) Healths() ([]*VolumeHealth, error) {
	it, err := s.read().Get(tHealth, iID)
	if err != nil {
		return nil, dbErr("read "+tHealth, err)
	}
	var out []*VolumeHealth
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*VolumeHealth).copy())
	}
	return out, nil
}

// checkHealthRow refuses a restored row the store would not write.
func checkHealthRow(h *VolumeHealth) error {
	if err := validateVolumeRef(h.Namespace, h.VolumeID); err != nil {
		return err
	}
	if slices.Contains(slices.Collect(maps.Values(h.Nodes)), nil) {
		return fmt.Errorf("health of volume %s: null node entry", volName(h.Namespace, h.VolumeID))
	}
	return nil
}
