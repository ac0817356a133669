// server_snapshot_reconcile.go brings snapshots made outside csikit
// into the state: RegisterSnapshot for one the host names, and
// ReconcileSnapshots for every one the plugin lists.

package rpcshim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// MaxSnapshotPages bounds the ListSnapshots pages of one
// ReconcileSnapshots, so that a plugin whose paging never ends cannot
// hold it forever.
const MaxSnapshotPages = 1000

// snapshotPageSize is the max_entries of each ListSnapshots page.
const snapshotPageSize = 100

// SnapshotRegisterRequest registers a snapshot that exists in the
// plugin (ExternalID set, Creating not). See state.RegisterSnapshot.
type SnapshotRegisterRequest struct {
	Snapshot csi.Snapshot
}

// RegisterSnapshot records an existing snapshot; the store's rules
// apply (state.RegisterSnapshot). No plugin is called.
func (s *Server) RegisterSnapshot(ctx context.Context, req *SnapshotRegisterRequest) (*SnapshotResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: register snapshot: nil request", csi.ErrInvalidRequest)
	}
	snap := req.Snapshot.Copy()
	op := fmt.Sprintf("register snapshot %s/%s", snap.Namespace, snap.ID)
	if err := s.authorize(ctx, op, snap.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	if snap.Creating || snap.Deleting {
		return nil, fmt.Errorf("%w: %s: a registration is of a snapshot that exists; CreateSnapshot and DeleteSnapshot write the intents",
			csi.ErrInvalidRequest, op)
	}
	unlock, err := s.lockSnapshot(ctx, op, snap.Namespace, snap.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	res, err := s.applier.Apply(ctx, state.RegisterSnapshot{Snapshot: *snap})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return s.snapshotResult(op, snap, res.Index, "", nil)
}

// SnapshotReconcileRequest lists a plugin's snapshots and registers
// those csikit does not know in Namespace.
type SnapshotReconcileRequest struct {
	PluginID  string
	Namespace string
	Secrets   csi.Secrets `json:",omitempty"`
}

// SnapshotReconcileResponse names what a reconcile wrote.
type SnapshotReconcileResponse struct {
	// Registered are the IDs of the snapshots registered, in the
	// plugin's order; Updated those whose readiness or size changed.
	Registered []string `json:",omitempty"`
	Updated    []string `json:",omitempty"`
	Index      uint64
}

// ImportedSnapshotID is the csikit ID ReconcileSnapshots gives the
// plugin's snapshot externalID: "imported-" and 24 hex digits of a
// hash of the plugin and external IDs, so a repeated reconcile finds
// the same record.
func ImportedSnapshotID(pluginID, externalID string) string {
	sum := sha256.Sum256([]byte(pluginID + "\x00" + externalID))
	return "imported-" + hex.EncodeToString(sum[:12])
}

// ReconcileSnapshots pages through the plugin's ListSnapshots (it needs
// LIST_SNAPSHOTS) and writes, one batch per page: a new record for
// each snapshot csikit does not know, in Namespace, named by
// ImportedSnapshotID, with its source volume when a volume of
// Namespace stands for it; and the readiness and size of known ones.
// A snapshot of a volume with a create still pending is skipped: it
// may be that create's, which resumes and records it. At most
// MaxSnapshotPages pages are read.
func (s *Server) ReconcileSnapshots(ctx context.Context, req *SnapshotReconcileRequest) (*SnapshotReconcileResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: reconcile snapshots: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("reconcile snapshots of plugin %s", req.PluginID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeWrite); err != nil {
		return nil, err
	}
	if err := csi.ValidatePluginID(req.PluginID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := csi.ValidateNamespace(req.Namespace); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := s.controllerCan(op, req.PluginID, "LIST_SNAPSHOTS", func(c csi.ControllerCapabilities) bool { return c.ListSnapshots }); err != nil {
		return nil, err
	}
	out := &SnapshotReconcileResponse{}
	token, seen := "", map[string]bool{}
	for page := 0; ; page++ {
		if page == MaxSnapshotPages {
			return out, fmt.Errorf("%s: the plugin's listing goes on past %d pages; what was read is recorded", op, MaxSnapshotPages)
		}
		lr, err := s.router.ListSnapshots(ctx, &ListSnapshotsRequest{
			CSIControllerQuery:   CSIControllerQuery{PluginID: req.PluginID},
			ListSnapshotsRequest: plugin.ListSnapshotsRequest{MaxEntries: snapshotPageSize, StartingToken: token, Secrets: req.Secrets},
		})
		if err != nil {
			return out, fmt.Errorf("%s: list page %d: %w", op, page+1, err)
		}
		if err := s.reconcilePage(ctx, req, lr.Entries, out); err != nil {
			return out, fmt.Errorf("%s: %w", op, err)
		}
		if lr.NextToken == "" {
			return out, nil
		}
		if seen[lr.NextToken] {
			return out, fmt.Errorf("%s: the plugin returned next token %q twice; its paging loops", op, lr.NextToken)
		}
		seen[lr.NextToken], token = true, lr.NextToken
	}
}

// reconcilePage writes what one page of the plugin's snapshots changes.
func (s *Server) reconcilePage(ctx context.Context, req *SnapshotReconcileRequest, entries []plugin.Snapshot, out *SnapshotReconcileResponse) error {
	known, err := s.store.SnapshotsByPlugin(req.PluginID)
	if err != nil {
		return err
	}
	byExternal, pendingSource := map[string]*csi.Snapshot{}, map[string]bool{}
	for _, k := range known {
		if k.Creating {
			pendingSource[k.SourceExternalID] = true
		} else {
			byExternal[k.ExternalID] = k
		}
	}
	vols, err := s.store.VolumesByPlugin(req.PluginID)
	if err != nil {
		return err
	}
	volOf := map[string]string{}
	for _, v := range vols {
		if v.Namespace == req.Namespace && v.ExternalID != "" {
			volOf[v.ExternalID] = v.ID
		}
	}
	var cmds []state.Command
	var added, updated []string
	for _, e := range entries {
		if k := byExternal[e.ID]; k != nil {
			if k.ReadyToUse != e.ReadyToUse || k.Size != e.Size {
				k.ReadyToUse, k.Size = e.ReadyToUse, e.Size
				cmds = append(cmds, state.RegisterSnapshot{Snapshot: *k})
				updated = append(updated, k.Namespace+"/"+k.ID)
			}
			continue
		}
		if pendingSource[e.SourceID] {
			continue
		}
		id := ImportedSnapshotID(req.PluginID, e.ID)
		cmds = append(cmds, state.RegisterSnapshot{Snapshot: csi.Snapshot{
			Namespace: req.Namespace, ID: id, SourceVolumeID: volOf[e.SourceID], SourceExternalID: e.SourceID,
			ExternalID: e.ID, PluginID: req.PluginID, Size: e.Size, CreatedAt: e.CreateTime.UTC(), ReadyToUse: e.ReadyToUse,
			Secrets: req.Secrets,
		}})
		added = append(added, id)
	}
	if len(cmds) == 0 {
		return nil
	}
	res, err := s.applier.Apply(ctx, state.Batch{Commands: cmds})
	if err != nil {
		return err
	}
	out.Registered, out.Updated, out.Index = append(out.Registered, added...), append(out.Updated, updated...), res.Index
	return nil
}
