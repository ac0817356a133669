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
	return guard(r, func() (*csi.Volume, error) { return r.store.Volume(namespace, id) })
}

// Volumes implements state.Reader.
func (r *Reader) Volumes(namespace, idPrefix string) ([]*csi.Volume, error) {
	return guard(r, func() ([]*csi.Volume, error) { return r.store.Volumes(namespace, idPrefix) })
}

// VolumesByPlugin implements state.Reader.
func (r *Reader) VolumesByPlugin(pluginID string) ([]*csi.Volume, error) {
	return guard(r, func() ([]*csi.Volume, error) { return r.store.VolumesByPlugin(pluginID) })
}

// VolumesByNode implements state.Reader.
func (r *Reader) VolumesByNode(nodeID string) ([]*csi.Volume, error) {
	return guard(r, func() ([]*csi.Volume, error) { return r.store.VolumesByNode(nodeID) })
}

// VolumesWithPastClaims implements state.Reader.
func (r *Reader) VolumesWithPastClaims() ([]*csi.Volume, error) {
	return guard(r, func() ([]*csi.Volume, error) { return r.store.VolumesWithPastClaims() })
}

// PastClaimVolumeIDs implements state.Reader.
func (r *Reader) PastClaimVolumeIDs() ([]state.VolumeStamp, error) {
	return guard(r, func() ([]state.VolumeStamp, error) { return r.store.PastClaimVolumeIDs() })
}

// Plugin implements state.Reader.
func (r *Reader) Plugin(id string) (*csi.Plugin, error) {
	return guard(r, func() (*csi.Plugin, error) { return r.store.Plugin(id) })
}

// Plugins implements state.Reader.
func (r *Reader) Plugins() ([]*csi.Plugin, error) {
	return guard(r, func() ([]*csi.Plugin, error) { return r.store.Plugins() })
}

// HealthyControllers implements state.Reader.
func (r *Reader) HealthyControllers(pluginID string) (map[string]*csi.PluginInfo, error) {
	return guard(r, func() (map[string]*csi.PluginInfo, error) { return r.store.HealthyControllers(pluginID) })
}

// Node implements state.Reader.
func (r *Reader) Node(id string) (*state.Node, error) {
	return guard(r, func() (*state.Node, error) { return r.store.Node(id) })
}

// Allocation implements state.Reader.
func (r *Reader) Allocation(id string) (*csi.Allocation, error) {
	return guard(r, func() (*csi.Allocation, error) { return r.store.Allocation(id) })
}

// AllocationsByNode implements state.Reader.
func (r *Reader) AllocationsByNode(nodeID string) ([]*csi.Allocation, error) {
	return guard(r, func() ([]*csi.Allocation, error) { return r.store.AllocationsByNode(nodeID) })
}

// Index implements state.Reader.
func (r *Reader) Index(table state.Table) (uint64, error) {
	return guard(r, func() (uint64, error) { return r.store.Index(table) })
}

// Capacity implements state.Reader.
func (r *Reader) Capacity(pluginID string) ([]state.Capacity, error) {
	return guard(r, func() ([]state.Capacity, error) { return r.store.Capacity(pluginID) })
}

// Feasibility implements state.Reader.
func (r *Reader) Feasibility(req *state.FeasibilityRequest, out []state.NodeFeasibility) ([]state.NodeFeasibility, error) {
	return guard(r, func() ([]state.NodeFeasibility, error) { return r.store.Feasibility(req, out) })
}

// Health implements state.Reader.
func (r *Reader) Health(namespace, volumeID string) (*state.VolumeHealth, error) {
	return guard(r, func() (*state.VolumeHealth, error) { return r.store.Health(namespace, volumeID) })
}

// Healths implements state.Reader.
func (r *Reader) Healths() ([]*state.VolumeHealth, error) {
	return guard(r, func() ([]*state.VolumeHealth, error) { return r.store.Healths() })
}

// VolumeSnapshot implements state.Reader.
func (r *Reader) VolumeSnapshot(namespace, id string) (*csi.Snapshot, error) {
	return guard(r, func() (*csi.Snapshot, error) { return r.store.VolumeSnapshot(namespace, id) })
}

// Snapshots implements state.Reader.
func (r *Reader) Snapshots(namespace string) ([]*csi.Snapshot, error) {
	return guard(r, func() ([]*csi.Snapshot, error) { return r.store.Snapshots(namespace) })
}

// SnapshotsByPlugin implements state.Reader.
func (r *Reader) SnapshotsByPlugin(pluginID string) ([]*csi.Snapshot, error) {
	return guard(r, func() ([]*csi.Snapshot, error) { return r.store.SnapshotsByPlugin(pluginID) })
}

// SnapshotsByVolume implements state.Reader.
func (r *Reader) SnapshotsByVolume(namespace, volumeID string) ([]*csi.Snapshot, error) {
	return guard(r, func() ([]*csi.Snapshot, error) { return r.store.SnapshotsByVolume(namespace, volumeID) })
}

// Wait implements state.Watcher. A Wait that is blocked when the FSM
// diverges returns the FSM's error then: the store will not change
// again.
func (r *Reader) Wait(ctx context.Context, table state.Table, minIndex uint64) (uint64, error) {
	return r.wait(ctx, func(ctx context.Context) (uint64, error) { return r.store.Wait(ctx, table, minIndex) })
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
	return r.wait(ctx, func(ctx context.Context) (uint64, error) {
		if pw, ok := r.store.(state.PastClaimWatcher); ok {
			return pw.WaitPastClaims(ctx, minIndex)
		}
		return r.store.Wait(ctx, state.TableVolumes, minIndex)
	})
}

// wait runs w with a ctx that also ends when the FSM diverges, and
// answers with the FSM's error once it has.
func (r *Reader) wait(ctx context.Context, w func(context.Context) (uint64, error)) (uint64, error) {
	if err := r.fsm.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.fsm.Failed():
			cancel()
		case <-ctx.Done():
		}
	}()
	idx, err := w(ctx)
	if ferr := r.fsm.Err(); ferr != nil {
		return 0, ferr
	}
	return idx, err
}

var _ state.ACLReader = (*Reader)(nil)

// ACLTokenByHash implements state.ACLReader, for a store that has it;
// another store's answer is csi.ErrNotSupported.
func (r *Reader) ACLTokenByHash(hash string) (*state.ACLToken, error) {
	return guard(r, func() (*state.ACLToken, error) {
		ar, err := r.aclStore()
		if err != nil {
			return nil, err
		}
		return ar.ACLTokenByHash(hash)
	})
}

// ACLTokens implements state.ACLReader, as ACLTokenByHash does.
func (r *Reader) ACLTokens() ([]*state.ACLToken, error) {
	return guard(r, func() ([]*state.ACLToken, error) {
		ar, err := r.aclStore()
		if err != nil {
			return nil, err
		}
		return ar.ACLTokens()
	})
}

// aclStore is the store's ACLReader, or csi.ErrNotSupported.
func (r *Reader) aclStore() (state.ACLReader, error) {
	ar, ok := r.store.(state.ACLReader)
	if !ok {
		return nil, fmt.Errorf("%w: store %T keeps no ACL tokens", csi.ErrNotSupported, r.store)
	}
	return ar, nil
}

// guard answers a read with the FSM's error once it diverged, and with
// read's answer until then.
func guard[T any](r *Reader, read func() (T, error)) (T, error) {
	if err := r.fsm.Err(); err != nil {
		var zero T
		return zero, err
	}
	return read()
}
