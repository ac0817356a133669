// snapshots.go owns the snapshot records: the snapshots table, the
// RegisterSnapshot and DeleteSnapshot commands that write it, and the
// SnapshotReader reads.
//
// Rules a reader must know:
//
//   - Snapshot rows belong to the volumes table: a change raises
//     TableVolumes' index, so a blocking query on volumes (a status
//     page) wakes for a snapshot too.
//   - A snapshot outlives its source volume: deregistering the volume
//     leaves its snapshots, whose SourceVolumeID then names nothing.
//   - One snapshot record at most stands for one backing snapshot
//     (plugin ID, external snapshot ID), as for volumes.
//   - A new snapshot with a source volume needs that volume registered
//     in the snapshot's namespace, of the same plugin, and not being
//     created: no snapshot of a volume that does not exist.
//   - Snapshots of version 2 written before snapshots existed have no
//     snapshot rows and restore with none.

package state

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/csikit/csikit/csi"
)

// The kinds of the snapshot commands.
const (
	KindRegisterSnapshot Kind = "register-snapshot"
	KindDeleteSnapshot   Kind = "delete-snapshot"
)

// tSnapshots holds one *csi.Snapshot per (namespace, ID).
const tSnapshots = "snapshots"

// Indexes of tSnapshots besides iID.
const (
	iSnapPlugin   = "plugin"   // plugin ID
	iSnapSource   = "source"   // namespace, source volume ID
	iSnapExternal = "external" // plugin ID, external snapshot ID
)

func snapshotTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: tSnapshots, Indexes: map[string]*memdb.IndexSchema{
		iID: {Name: iID, Unique: true, Indexer: single(2, func(s *csi.Snapshot) []string {
			return []string{s.Namespace, s.ID}
		})},
		iSnapPlugin: {Name: iSnapPlugin, Indexer: single(1, func(s *csi.Snapshot) []string { return []string{s.PluginID} })},
		iSnapSource: {Name: iSnapSource, AllowMissing: true, Indexer: single(2, func(s *csi.Snapshot) []string {
			if s.SourceVolumeID == "" {
				return nil
			}
			return []string{s.Namespace, s.SourceVolumeID}
		})},
		// An external ID may hold a NUL, which ends a part: a lookup
		// checks the external ID of each snapshot it yields.
		iSnapExternal: {Name: iSnapExternal, AllowMissing: true, Indexer: single(2, func(s *csi.Snapshot) []string {
			if s.ExternalID == "" {
				return nil
			}
			return []string{s.PluginID, s.ExternalID}
		})},
	}}
}

// RegisterSnapshot creates a snapshot record or updates one.
//
// The record is an intent while Creating (no ExternalID yet: the
// server writes it before calling the plugin's CreateSnapshot) and
// complete once ExternalID is set; Deleting marks the intent of a
// delete, after which the snapshot is never made ready again. A new
// snapshot's plugin must exist (csi.ErrPluginNotFound) and its source
// volume, when named, must be registered in the same namespace with the
// same plugin and not be Creating itself (csi.ErrVolumeNotFound,
// csi.ErrInvalidRequest). Its backing snapshot (PluginID, ExternalID)
// must not be registered as another snapshot (csi.ErrSnapshotExists).
// An update may change Size, CreatedAt, ReadyToUse, Parameters and
// Secrets, complete a creation (set ExternalID), and set Deleting; it
// may not change the plugin, the source or a set external ID, return to
// Creating, or clear Deleting (csi.ErrSnapshotExists). An update that
// changes nothing writes nothing (Result.Changed false). CreatedAt is
// stored in UTC; indexes in the command are ignored.
type RegisterSnapshot struct {
	Snapshot csi.Snapshot
}

// DeleteSnapshot removes a snapshot record, with no plugin call.
// csi.ErrSnapshotNotFound if there is none, which a delete resumed
// after a crash treats as done.
type DeleteSnapshot struct {
	Namespace  string
	SnapshotID string
}

// Kind implements Command.
func (RegisterSnapshot) Kind() Kind { return KindRegisterSnapshot }

// Kind implements Command.
func (DeleteSnapshot) Kind() Kind { return KindDeleteSnapshot }

func snapName(ns, id string) string { return ns + "/" + id }

func snapshotNotFound(ns, id string) error {
	return fmt.Errorf("%w: snapshot %s is not registered in namespace %s", csi.ErrSnapshotNotFound, id, ns)
}

func validateSnapshotRef(ns, id string) error {
	if err := csi.ValidateNamespace(ns); err != nil {
		return err
	}
	return csi.ValidateSnapshotID(id)
}

func validateSnapshot(s *csi.Snapshot) error {
	if err := validateSnapshotRef(s.Namespace, s.ID); err != nil {
		return err
	}
	name := snapName(s.Namespace, s.ID)
	if err := csi.ValidatePluginID(s.PluginID); err != nil {
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	if s.SourceVolumeID != "" {
		if err := csi.ValidateVolumeID(s.SourceVolumeID); err != nil {
			return fmt.Errorf("snapshot %s: %w", name, err)
		}
	}
	switch {
	case s.Creating && s.ExternalID != "":
		return fmt.Errorf("%w: snapshot %s is being created and names external ID %q; an intent has no external ID until the plugin answers",
			csi.ErrInvalidRequest, name, s.ExternalID)
	case s.Creating && s.SourceVolumeID == "":
		return fmt.Errorf("%w: snapshot %s is being created without a source volume; name the volume to snapshot",
			csi.ErrInvalidRequest, name)
	case !s.Creating:
		if err := csi.ValidateExternalID("external snapshot ID", s.ExternalID); err != nil {
			return fmt.Errorf("snapshot %s: %w", name, err)
		}
	}
	if s.Size < 0 {
		return fmt.Errorf("%w: snapshot %s has size %d; give a size in bytes, or 0 for unknown", csi.ErrInvalidRequest, name, s.Size)
	}
	return nil
}

func normalizeSnapshot(s *csi.Snapshot) {
	s.Parameters = nilIfEmpty(s.Parameters)
	if len(s.Secrets) == 0 {
		s.Secrets = nil
	}
	s.CreatedAt = s.CreatedAt.UTC()
}

func (c RegisterSnapshot) apply(w *writer) error {
	s := c.Snapshot.Copy()
	if err := validateSnapshot(s); err != nil {
		return err
	}
	normalizeSnapshot(s)
	old, err := getOne[*csi.Snapshot](w.txn, tSnapshots, s.Namespace, s.ID)
	if err != nil {
		return err
	}
	if old == nil {
		return w.registerNewSnapshot(s)
	}
	return w.updateSnapshot(old, s)
}

func (w *writer) registerNewSnapshot(s *csi.Snapshot) error {
	name := snapName(s.Namespace, s.ID)
	p, err := getPlugin(w.txn, s.PluginID)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("register snapshot %s: %w", name, pluginNotFound(s.PluginID))
	}
	if s.SourceVolumeID != "" {
		v, err := w.mustVolume(s.Namespace, s.SourceVolumeID)
		if err != nil {
			return fmt.Errorf("register snapshot %s: %w", name, err)
		}
		switch {
		case v.PluginID != s.PluginID:
			return fmt.Errorf("%w: snapshot %s names plugin %s, but its source volume %s is of plugin %s",
				csi.ErrInvalidRequest, name, s.PluginID, volName(v.Namespace, v.ID), v.PluginID)
		case v.Creating:
			return fmt.Errorf("%w: snapshot %s: its source volume %s is still being created; complete the create first",
				csi.ErrInvalidRequest, name, volName(v.Namespace, v.ID))
		}
		if s.SourceExternalID == "" {
			s.SourceExternalID = v.ExternalID
		}
	}
	if s.Deleting {
		return fmt.Errorf("%w: snapshot %s is new and marked Deleting; a delete intent is set on a registered snapshot",
			csi.ErrInvalidRequest, name)
	}
	if err := w.checkSnapshotExternalFree(s); err != nil {
		return err
	}
	s.CreateIndex, s.ModifyIndex = w.index, w.index
	return w.insert(tSnapshots, s)
}

func (w *writer) updateSnapshot(old, s *csi.Snapshot) error {
	name := snapName(s.Namespace, s.ID)
	completes := old.Creating && !s.Creating
	switch {
	case s.Creating && !old.Creating:
		return fmt.Errorf("%w: snapshot %s exists and is not being created; delete it first to create it again", csi.ErrSnapshotExists, name)
	case s.PluginID != old.PluginID:
		return fmt.Errorf("%w: snapshot %s exists with plugin %s, not %s", csi.ErrSnapshotExists, name, old.PluginID, s.PluginID)
	case s.SourceVolumeID != old.SourceVolumeID:
		return fmt.Errorf("%w: snapshot %s exists of volume %q, not %q; use another snapshot ID",
			csi.ErrSnapshotExists, name, old.SourceVolumeID, s.SourceVolumeID)
	case s.ExternalID != old.ExternalID && !completes:
		return fmt.Errorf("%w: snapshot %s exists with external ID %q, not %q", csi.ErrSnapshotExists, name, old.ExternalID, s.ExternalID)
	case old.Deleting && !s.Deleting:
		return fmt.Errorf("%w: snapshot %s is being deleted; finish the delete, then create it again", csi.ErrSnapshotExists, name)
	}
	if s.SourceExternalID == "" {
		s.SourceExternalID = old.SourceExternalID
	}
	if completes {
		if err := w.checkSnapshotExternalFree(s); err != nil {
			return err
		}
	}
	s.CreateIndex, s.ModifyIndex = old.CreateIndex, old.ModifyIndex
	if reflect.DeepEqual(s, old) {
		return nil
	}
	s.ModifyIndex = w.index
	return w.insert(tSnapshots, s)
}

// checkSnapshotExternalFree refuses s when its backing snapshot is
// registered as another snapshot.
func (w *writer) checkSnapshotExternalFree(s *csi.Snapshot) error {
	if s.ExternalID == "" {
		return nil
	}
	it, err := w.txn.Get(tSnapshots, iSnapExternal, s.PluginID, s.ExternalID)
	if err != nil {
		return dbErr("look up external snapshot", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		h := raw.(*csi.Snapshot)
		if h.ExternalID != s.ExternalID || (h.Namespace == s.Namespace && h.ID == s.ID) {
			continue
		}
		holder := "a snapshot of another namespace"
		if h.Namespace == s.Namespace {
			holder = "snapshot " + snapName(h.Namespace, h.ID)
		}
		return fmt.Errorf("%w: cannot register snapshot %s: external snapshot %q of plugin %s is registered as %s",
			csi.ErrSnapshotExists, snapName(s.Namespace, s.ID), s.ExternalID, s.PluginID, holder)
	}
	return nil
}

func (c DeleteSnapshot) apply(w *writer) error {
	if err := validateSnapshotRef(c.Namespace, c.SnapshotID); err != nil {
		return err
	}
	old, err := getOne[*csi.Snapshot](w.txn, tSnapshots, c.Namespace, c.SnapshotID)
	if err != nil {
		return err
	}
	if old == nil {
		return snapshotNotFound(c.Namespace, c.SnapshotID)
	}
	return w.delete(tSnapshots, old)
}

// SnapshotReader reads snapshots. The contract of VolumeReader applies,
// ownership included: every snapshot returned is a deep copy the caller
// owns, secrets included (strip them before a status output). Lists are
// sorted by (namespace, ID); none is an empty list, not an error. A
// missing snapshot matches csi.ErrSnapshotNotFound.
type SnapshotReader interface {
	// VolumeSnapshot returns one snapshot. (It is not named Snapshot:
	// that is Snapshotter's method, which writes the whole state.)
	VolumeSnapshot(namespace, id string) (*csi.Snapshot, error)
	// Snapshots returns the snapshots of namespace; "" means every
	// namespace.
	Snapshots(namespace string) ([]*csi.Snapshot, error)
	// SnapshotsByPlugin returns the snapshots of one plugin.
	SnapshotsByPlugin(pluginID string) ([]*csi.Snapshot, error)
	// SnapshotsByVolume returns the snapshots whose source is the
	// volume namespace/volumeID, registered or not (a snapshot outlives
	// its source).
	SnapshotsByVolume(namespace, volumeID string) ([]*csi.Snapshot, error)
}

var _ SnapshotReader = (*MemStore)(nil)

// VolumeSnapshot implements SnapshotReader.
func (s *MemStore) VolumeSnapshot(namespace, id string) (*csi.Snapshot, error) {
	if err := validateSnapshotRef(namespace, id); err != nil {
		return nil, err
	}
	snap, err := getOne[*csi.Snapshot](s.read(), tSnapshots, namespace, id)
	if err != nil {
		return nil, err
	}
	if snap == nil {
		return nil, snapshotNotFound(namespace, id)
	}
	return snap.Copy(), nil
}

// Snapshots implements SnapshotReader.
func (s *MemStore) Snapshots(namespace string) ([]*csi.Snapshot, error) {
	if namespace == "" {
		return listSnapshots(s.read(), iID)
	}
	if err := csi.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	return listSnapshots(s.read(), iID+"_prefix", namespace, "")
}

// SnapshotsByPlugin implements SnapshotReader.
func (s *MemStore) SnapshotsByPlugin(pluginID string) ([]*csi.Snapshot, error) {
	if err := csi.ValidatePluginID(pluginID); err != nil {
		return nil, err
	}
	return listSnapshots(s.read(), iSnapPlugin, pluginID)
}

// SnapshotsByVolume implements SnapshotReader.
func (s *MemStore) SnapshotsByVolume(namespace, volumeID string) ([]*csi.Snapshot, error) {
	if err := validateVolumeRef(namespace, volumeID); err != nil {
		return nil, err
	}
	return listSnapshots(s.read(), iSnapSource, namespace, volumeID)
}

func listSnapshots(txn *memdb.Txn, index string, args ...any) ([]*csi.Snapshot, error) {
	it, err := txn.Get(tSnapshots, index, args...)
	if err != nil {
		return nil, dbErr("list snapshots", err)
	}
	out := []*csi.Snapshot{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*csi.Snapshot).Copy())
	}
	slices.SortFunc(out, func(a, b *csi.Snapshot) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// checkSnapshotRow refuses a restored snapshot row the store would not
// write.
func checkSnapshotRow(s *csi.Snapshot) error {
	if err := validateSnapshot(s); err != nil {
		return err
	}
	if s.Creating && s.Deleting {
		return fmt.Errorf("snapshot %s: both Creating and Deleting", snapName(s.Namespace, s.ID))
	}
	return nil
}
