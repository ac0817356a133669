// server_snapshot.go holds the Server's snapshot endpoints:
// CreateSnapshot, DeleteSnapshot, the reads, RegisterSnapshot and
// ReconcileSnapshots. Restore and clone are in the create path
// (server_create.go, server_source.go).

package rpcshim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// snapshotBackoff is how CreateSnapshot spaces its calls while the
// plugin is unavailable or the snapshot is not ready yet, on the
// Server's clock.
var snapshotBackoff = backoff.Policy{Base: time.Second, Max: 30 * time.Second}

// MaxSnapshotAttempts bounds the CreateSnapshot calls of one
// Server.CreateSnapshot: past it the snapshot is reported not ready
// (csi.ErrSnapshotNotReady) and a retry goes on polling.
const MaxSnapshotAttempts = 12

// SnapshotCreateRequest snapshots a volume.
type SnapshotCreateRequest struct {
	Namespace  string
	VolumeID   string
	SnapshotID string
	Parameters map[string]string `json:",omitempty"`
	// Secrets go to CreateSnapshot and, kept with the snapshot, to
	// DeleteSnapshot; nil means the source volume's.
	Secrets csi.Secrets `json:",omitempty"`
}

// SnapshotResponse is a snapshot after a write, secrets removed.
type SnapshotResponse struct {
	Snapshot *csi.Snapshot
	Index    uint64
	// ControllerNodeID is the host node whose controller served the
	// last plugin call; empty when none was made.
	ControllerNodeID string `json:",omitempty"`
}

// SnapshotDeleteRequest deletes a snapshot in the plugin and forgets it.
type SnapshotDeleteRequest struct {
	Namespace  string
	SnapshotID string
}

func (s *Server) lockSnapshot(ctx context.Context, op, namespace, id string) (func(), error) {
	if err := csi.ValidateNamespace(namespace); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := csi.ValidateSnapshotID(id); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	unlock, err := s.snaps.lock(ctx, volKey{namespace, id})
	if err != nil {
		return nil, fmt.Errorf("%s: gave up waiting for another operation on snapshot %s/%s: %w", op, namespace, id, err)
	}
	return unlock, nil
}

// controllerCan reports whether a healthy controller of the plugin
// advertises what has asks for: csi.ErrNoController when none is
// healthy, csi.ErrNotSupported when none advertises it.
func (s *Server) controllerCan(op, pluginID, what string, has func(csi.ControllerCapabilities) bool) error {
	ctrls, err := s.router.healthyControllers(pluginID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(ctrls) == 0 {
		return fmt.Errorf("%w: %s: plugin %s has no healthy controller; retry once one is running", csi.ErrNoController, op, pluginID)
	}
	for _, c := range ctrls {
		if c.ControllerInfo != nil && has(c.ControllerInfo.Capabilities) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: the controller of plugin %s does not advertise %s", csi.ErrNotSupported, op, pluginID, what)
}

func canSnapshot(c csi.ControllerCapabilities) bool { return c.CreateDeleteSnapshot }

// CreateSnapshot snapshots a volume through a controller of its plugin
// and records it. In order:
//
//  1. The intent is written: a snapshot record with Creating set. A
//     record already complete for the same volume is returned as it is
//     (once ready); one of another volume is csi.ErrSnapshotExists.
//  2. The plugin's CreateSnapshot is called with the snapshot's
//     deterministic name (csi.SnapshotName), so a retried create, or
//     one resumed by another Server after a crash, gets the snapshot
//     made the first time. A Final refusal removes the intent;
//     Unavailable and the like are retried with backoff on the clock.
//  3. The answer is recorded. While the plugin reports it not
//     ready_to_use, CreateSnapshot is repeated with backoff, at most
//     MaxSnapshotAttempts calls in all; then csi.ErrSnapshotNotReady,
//     with the snapshot recorded, and a retry goes on waiting.
func (s *Server) CreateSnapshot(ctx context.Context, req *SnapshotCreateRequest) (*SnapshotResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: create snapshot: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("create snapshot %s/%s of volume %s", req.Namespace, req.SnapshotID, req.VolumeID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	unlock, err := s.lockSnapshot(ctx, op, req.Namespace, req.SnapshotID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	unlockVol, err := s.lockVolume(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlockVol()
	snap, v, err := s.snapshotIntent(ctx, op, req)
	if err != nil || snap.ReadyToUse {
		return s.snapshotResult(op, snap, 0, "", err)
	}
	return s.pollSnapshot(ctx, op, snap, v)
}

// snapshotIntent is CreateSnapshot's step 1. It returns the record to
// go on with (ready: nothing left to do) and the source volume.
func (s *Server) snapshotIntent(ctx context.Context, op string, req *SnapshotCreateRequest) (*csi.Snapshot, *csi.Volume, error) {
	old, err := s.store.VolumeSnapshot(req.Namespace, req.SnapshotID)
	switch {
	case err == nil && old.SourceVolumeID != req.VolumeID:
		return nil, nil, fmt.Errorf("%w: %s: the snapshot exists, of volume %q; use another snapshot ID", csi.ErrSnapshotExists, op, old.SourceVolumeID)
	case err == nil && old.Deleting:
		return nil, nil, fmt.Errorf("%w: %s: the snapshot is being deleted; retry the delete, then create it again", csi.ErrSnapshotExists, op)
	case err == nil && old.ReadyToUse:
		return old, nil, nil
	case err != nil && !errors.Is(err, csi.ErrSnapshotNotFound):
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	v, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	if v.Creating {
		return nil, nil, fmt.Errorf("%w: %s: the volume is still being created; complete the create first", csi.ErrVolumeInUse, op)
	}
	if err := s.controllerCan(op, v.PluginID, "CREATE_DELETE_SNAPSHOT", canSnapshot); err != nil {
		return nil, nil, err
	}
	if old != nil { // an intent, or a snapshot not ready yet: go on polling
		return old, v, nil
	}
	secrets := req.Secrets
	if secrets == nil {
		secrets = v.Secrets
	}
	snap := &csi.Snapshot{Namespace: req.Namespace, ID: req.SnapshotID, SourceVolumeID: v.ID, SourceExternalID: v.ExternalID,
		PluginID: v.PluginID, Creating: true, Parameters: req.Parameters, Secrets: secrets}
	if _, err := s.applier.Apply(ctx, state.RegisterSnapshot{Snapshot: *snap}); err != nil {
		return nil, nil, fmt.Errorf("%s: writing the intent failed, so the plugin was not called: %w", op, err)
	}
	return snap, v, nil
}

// pollSnapshot is CreateSnapshot's steps 2 and 3.
func (s *Server) pollSnapshot(ctx context.Context, op string, snap *csi.Snapshot, v *csi.Volume) (*SnapshotResponse, error) {
	name := csi.SnapshotName(snap.Namespace, snap.ID)
	var lastErr error
	for attempt := 1; attempt <= MaxSnapshotAttempts; attempt++ {
		if attempt > 1 {
			if err := clock.Sleep(ctx, s.clock, snapshotBackoff.Delay(attempt-1)); err != nil {
				return nil, fmt.Errorf("%s: gave up waiting (the intent is kept; retry the create): %w", op, errors.Join(err, lastErr))
			}
		}
		cr, err := s.router.CreateSnapshot(ctx, &CreateSnapshotRequest{
			CSIControllerQuery: CSIControllerQuery{PluginID: snap.PluginID},
			CreateSnapshotRequest: plugin.CreateSnapshotRequest{
				SourceID: v.ExternalID, Name: name, Parameters: snap.Parameters, Secrets: snap.Secrets,
			},
		})
		if err != nil && csi.Classify(err) == csi.ClassFinal {
			return nil, s.dropSnapshotIntent(ctx, op, snap, err)
		}
		if err != nil {
			lastErr = err
			continue
		}
		snap.Creating = false
		snap.ExternalID, snap.Size, snap.ReadyToUse = cr.Snapshot.ID, cr.Snapshot.Size, cr.Snapshot.ReadyToUse
		snap.CreatedAt = cr.Snapshot.CreateTime.UTC()
		res, err := s.applier.Apply(ctx, state.RegisterSnapshot{Snapshot: *snap})
		if err != nil {
			return nil, fmt.Errorf("%s: plugin %s made snapshot %q but recording it failed; the intent is kept, so retry the create: %w",
				op, snap.PluginID, snap.ExternalID, err)
		}
		if snap.ReadyToUse {
			return s.snapshotResult(op, snap, res.Index, cr.ControllerNodeID, nil)
		}
		lastErr = fmt.Errorf("%w: plugin %s reports snapshot %q not ready to use", csi.ErrSnapshotNotReady, snap.PluginID, snap.ExternalID)
	}
	if !errors.Is(lastErr, csi.ErrSnapshotNotReady) {
		return nil, fmt.Errorf("%s: %d calls did not succeed; the intent is kept, so retry the create: %w", op, MaxSnapshotAttempts, lastErr)
	}
	return nil, fmt.Errorf("%s: not ready after %d calls; it is recorded, so retry the create to go on waiting: %w", op, MaxSnapshotAttempts, lastErr)
}

// dropSnapshotIntent removes an intent the plugin refused for good.
func (s *Server) dropSnapshotIntent(ctx context.Context, op string, snap *csi.Snapshot, cause error) error {
	if !snap.Creating {
		return fmt.Errorf("%s: %w", op, cause)
	}
	_, err := s.applier.Apply(ctx, state.DeleteSnapshot{Namespace: snap.Namespace, SnapshotID: snap.ID})
	if err != nil && !errors.Is(err, csi.ErrSnapshotNotFound) {
		return fmt.Errorf("%s: %w; removing the intent failed too (%v)", op, cause, err)
	}
	return fmt.Errorf("%s: %w", op, cause)
}

func (s *Server) snapshotResult(op string, snap *csi.Snapshot, index uint64, node string, err error) (*SnapshotResponse, error) {
	if err != nil {
		return nil, err
	}
	got, err := s.store.VolumeSnapshot(snap.Namespace, snap.ID)
	if err != nil {
		return nil, fmt.Errorf("%s: written at index %d, but reading it back failed: %w", op, index, err)
	}
	got.Secrets = nil
	return &SnapshotResponse{Snapshot: got, Index: index, ControllerNodeID: node}, nil
}

// DeleteSnapshot deletes a snapshot in its plugin (NotFound counts as
// deleted) and forgets it. The delete intent (Deleting) is written
// first, so no restore starts from it meanwhile and a failed delete is
// retried to completion. Deleting a snapshot csikit does not know is
// csi.ErrSnapshotNotFound, which a caller retrying a delete treats as
// done; one whose create has not completed (an intent left by a crash)
// is csi.ErrSnapshotNotReady: retry the create first.
func (s *Server) DeleteSnapshot(ctx context.Context, req *SnapshotDeleteRequest) (*WriteResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: delete snapshot: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("delete snapshot %s/%s", req.Namespace, req.SnapshotID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	unlock, err := s.lockSnapshot(ctx, op, req.Namespace, req.SnapshotID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	snap, err := s.store.VolumeSnapshot(req.Namespace, req.SnapshotID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if snap.Creating {
		// The plugin may have made it under the name without csikit
		// hearing back: forgetting the intent would orphan it.
		return nil, fmt.Errorf("%w: %s: its create has not completed; retry the create (it resumes under the same name, or drops the intent if the plugin refuses), then delete",
			csi.ErrSnapshotNotReady, op)
	}
	if !snap.Deleting {
		snap.Deleting = true
		if _, err := s.applier.Apply(ctx, state.RegisterSnapshot{Snapshot: *snap}); err != nil {
			return nil, fmt.Errorf("%s: writing the delete intent failed, so the plugin was not called: %w", op, err)
		}
	}
	dr, err := s.router.DeleteSnapshot(ctx, &DeleteSnapshotRequest{
		CSIControllerQuery:    CSIControllerQuery{PluginID: snap.PluginID},
		DeleteSnapshotRequest: plugin.DeleteSnapshotRequest{ID: snap.ExternalID, Secrets: snap.Secrets},
	})
	if !csi.TeardownDone(err) {
		return nil, fmt.Errorf("%s: the delete intent is kept, so retry the delete: %w", op, err)
	}
	var node string
	if dr != nil { // nil when the plugin no longer had it
		node = dr.ControllerNodeID
	}
	res, err := s.applier.Apply(ctx, state.DeleteSnapshot{Namespace: req.Namespace, SnapshotID: req.SnapshotID})
	if err != nil {
		return nil, fmt.Errorf("%s: deleted in the plugin but not forgotten; retry the delete: %w", op, err)
	}
	return &WriteResponse{Index: res.Index, ControllerNodeID: node}, nil
}

// Snapshot returns one snapshot, secrets removed.
func (s *Server) Snapshot(ctx context.Context, namespace, id string) (*csi.Snapshot, error) {
	if err := s.authorize(ctx, "read snapshot "+namespace+"/"+id, namespace, csi.PermVolumeRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snap, err := s.store.VolumeSnapshot(namespace, id)
	if err != nil {
		return nil, err
	}
	snap.Secrets = nil
	return snap, nil
}

// ListSnapshots returns the snapshots of namespace ("" for all) from the
// state, secrets removed; volumeID, if set, keeps those of one source
// volume. It calls no plugin: ReconcileSnapshots brings in snapshots
// made outside csikit.
func (s *Server) ListSnapshots(ctx context.Context, namespace, volumeID string) ([]*csi.Snapshot, error) {
	if err := s.authorize(ctx, "list snapshots", cmp.Or(namespace, csi.AllNamespaces), csi.PermVolumeRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var snaps []*csi.Snapshot
	var err error
	if volumeID != "" {
		snaps, err = s.store.SnapshotsByVolume(namespace, volumeID)
	} else {
		snaps, err = s.store.Snapshots(namespace)
	}
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		snap.Secrets = nil
	}
	return snaps, nil
}
