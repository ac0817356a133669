package raftstate

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// Reader is the store's state.Reader (and state.PastClaimWatcher) that
// answers every read with the FSM's error once the replica diverged
// (ErrStateDiverged): a diverged store stops at an entry it could not
// apply, so what it holds is stale and must not be served as the
// cluster's state. Until then each read is the store's own, with its
// contract (ownership included). Safe for concurrent use.
type Reader struct {
	fsm   *FSM
	store state.Store
}

var (
	_ state.Reader           = (*Reader)(nil)
	_ state.PastClaimWatcher = (*Reader)(nil)
)

// Reader returns the reads of the FSM's store, refused once the FSM
// diverged. Serve reads from it rather than from the store itself.
func (f *FSM) Reader() *Reader { return &Reader{fsm: f, store: f.store} }

// Reader returns the reads of this server's store, refused once its
// FSM diverged (FSM.Reader).
func (s *Server) Reader() *Reader { return s.fsm.Reader() }

// Volume implements state.Reader.
func (r *Reader) Volume(namespace, id string) (*csi.Volume, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Volume(namespace, id)
}

// Volumes implements state.Reader.
func (r *Reader) Volumes(namespace, idPrefix string) ([]*csi.Volume, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Volumes(namespace, idPrefix)
}

// VolumesByPlugin implements state.Reader.
func (r *Reader) VolumesByPlugin(pluginID string) ([]*csi.Volume, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.VolumesByPlugin(pluginID)
}

// VolumesByNode implements state.Reader.
func (r *Reader) VolumesByNode(nodeID string) ([]*csi.Volume, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.VolumesByNode(nodeID)
}

// VolumesWithPastClaims implements state.Reader.
func (r *Reader) VolumesWithPastClaims() ([]*csi.Volume, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.VolumesWithPastClaims()
}

// PastClaimVolumeIDs implements state.Reader.
func (r *Reader) PastClaimVolumeIDs() ([]state.VolumeStamp, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.PastClaimVolumeIDs()
}

// Plugin implements state.Reader.
func (r *Reader) Plugin(id string) (*csi.Plugin, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Plugin(id)
}

// Plugins implements state.Reader.
func (r *Reader) Plugins() ([]*csi.Plugin, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Plugins()
}

// HealthyControllers implements state.Reader.
func (r *Reader) HealthyControllers(pluginID string) (map[string]*csi.PluginInfo, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.HealthyControllers(pluginID)
}

// Node implements state.Reader.
func (r *Reader) Node(id string) (*state.Node, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Node(id)
}

// Allocation implements state.Reader.
func (r *Reader) Allocation(id string) (*csi.Allocation, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Allocation(id)
}

// AllocationsByNode implements state.Reader.
func (r *Reader) AllocationsByNode(nodeID string) ([]*csi.Allocation, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.AllocationsByNode(nodeID)
}

// Index implements state.Reader.
func (r *Reader) Index(table state.Table) (uint64, error) {
	if err := r.fsm.Err(); err != nil {
		return 0, err
	}
	return r.store.Index(table)
}

// Capacity implements state.Reader.
func (r *Reader) Capacity(pluginID string) ([]state.Capacity, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Capacity(pluginID)
}

// Feasibility implements state.Reader.
func (r *Reader) Feasibility(req *state.FeasibilityRequest, out []state.NodeFeasibility) ([]state.NodeFeasibility, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Feasibility(req, out)
}

// Health implements state.Reader.
func (r *Reader) Health(namespace, volumeID string) (*state.VolumeHealth, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Health(namespace, volumeID)
}

// Healths implements state.Reader.
func (r *Reader) Healths() ([]*state.VolumeHealth, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Healths()
}

// VolumeSnapshot implements state.Reader.
func (r *Reader) VolumeSnapshot(namespace, id string) (*csi.Snapshot, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.VolumeSnapshot(namespace, id)
}

// Snapshots implements state.Reader.
func (r *Reader) Snapshots(namespace string) ([]*csi.Snapshot, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.Snapshots(namespace)
}

// SnapshotsByPlugin implements state.Reader.
func (r *Reader) SnapshotsByPlugin(pluginID string) ([]*csi.Snapshot, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.SnapshotsByPlugin(pluginID)
}

// SnapshotsByVolume implements state.Reader.
func (r *Reader) SnapshotsByVolume(namespace, volumeID string) ([]*csi.Snapshot, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	return r.store.SnapshotsByVolume(namespace, volumeID)
}

// Wait implements state.Watcher. A Wait that is blocked when the FSM
// diverges returns when ctx ends or the store changes; its answer is
// then the FSM's error.
func (r *Reader) Wait(ctx context.Context, table state.Table, minIndex uint64) (uint64, error) {
	if err := r.fsm.Err(); err != nil {
		return 0, err
	}
	idx, err := r.store.Wait(ctx, table, minIndex)
	if ferr := r.fsm.Err(); ferr != nil {
		return 0, ferr
	}
	return idx, err
}

// PastClaimsIndex implements state.PastClaimWatcher; a store without it
// answers with its volume table's index.
func (r *Reader) PastClaimsIndex() (uint64, error) {
	if err := r.fsm.Err(); err != nil {
		return 0, err
	}
	if pw, ok := r.store.(state.PastClaimWatcher); ok {
		return pw.PastClaimsIndex()
	}
	return r.store.Index(state.TableVolumes)
}

// WaitPastClaims implements state.PastClaimWatcher, as Wait does; a
// store without it is waited on through its volume table.
func (r *Reader) WaitPastClaims(ctx context.Context, minIndex uint64) (uint64, error) {
	if err := r.fsm.Err(); err != nil {
		return 0, err
	}
	var idx uint64
	var err error
	if pw, ok := r.store.(state.PastClaimWatcher); ok {
		idx, err = pw.WaitPastClaims(ctx, minIndex)
	} else {
		idx, err = r.store.Wait(ctx, state.TableVolumes, minIndex)
	}
	if ferr := r.fsm.Err(); ferr != nil {
		return 0, ferr
	}
	return idx, err
}

var _ state.ACLReader = (*Reader)(nil)

// ACLTokenByHash implements state.ACLReader, for a store that has it;
// another store's answer is csi.ErrNotSupported.
func (r *Reader) ACLTokenByHash(hash string) (*state.ACLToken, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	ar, ok := r.store.(state.ACLReader)
	if !ok {
		return nil, fmt.Errorf("%w: store %T keeps no ACL tokens", csi.ErrNotSupported, r.store)
	}
	return ar.ACLTokenByHash(hash)
}

// ACLTokens implements state.ACLReader, as ACLTokenByHash does.
func (r *Reader) ACLTokens() ([]*state.ACLToken, error) {
	if err := r.fsm.Err(); err != nil {
		return nil, err
	}
	ar, ok := r.store.(state.ACLReader)
	if !ok {
		return nil, fmt.Errorf("%w: store %T keeps no ACL tokens", csi.ErrNotSupported, r.store)
	}
	return ar.ACLTokens()
}
