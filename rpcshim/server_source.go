// server_source.go resolves the content source of a CreateVolume:
// restore from a csikit snapshot, clone of a csikit volume.

package rpcshim

import (
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// VolumeSource names what a new volume is filled from: exactly one of
// SnapshotID (a restore, which needs CREATE_DELETE_SNAPSHOT) and
// VolumeID (a clone, which needs CLONE_VOLUME). Namespace, if set, must
// be the new volume's: a volume is never filled from another
// namespace (csi.ErrNamespaceMismatch).
type VolumeSource struct {
	Namespace  string `json:",omitempty"`
	SnapshotID string `json:",omitempty"`
	VolumeID   string `json:",omitempty"`
}

// resolveSource checks req's content source against the store and the
// plugin, raises v's minimum capacity to the source's size, and returns
// the plugin's content source (nil for none).
func (s *Server) resolveSource(op string, v *csi.Volume, req *VolumeCreateRequest) (*plugin.ContentSource, error) {
	f := req.From
	if f == nil {
		return req.Source, nil
	}
	switch {
	case req.Source != nil:
		return nil, fmt.Errorf("%w: %s: give From or Source, not both", csi.ErrInvalidRequest, op)
	case (f.SnapshotID == "") == (f.VolumeID == ""):
		return nil, fmt.Errorf("%w: %s: the source must name exactly one of a snapshot and a volume", csi.ErrInvalidRequest, op)
	case f.Namespace != "" && f.Namespace != v.Namespace:
		return nil, fmt.Errorf("%w: %s: the source is in namespace %s; a volume is filled only from its own namespace",
			csi.ErrNamespaceMismatch, op, f.Namespace)
	}
	if f.SnapshotID != "" {
		return s.restoreSource(op, v, f.SnapshotID)
	}
	return s.cloneSource(op, v, f.VolumeID)
}

func (s *Server) restoreSource(op string, v *csi.Volume, id string) (*plugin.ContentSource, error) {
	snap, err := s.store.VolumeSnapshot(v.Namespace, id)
	if err != nil {
		return nil, fmt.Errorf("%s: restore: %w", op, err)
	}
	switch {
	case snap.PluginID != v.PluginID:
		return nil, fmt.Errorf("%w: %s: snapshot %s is of plugin %s, not %s", csi.ErrInvalidRequest, op, id, snap.PluginID, v.PluginID)
	case snap.Creating || snap.Deleting || !snap.ReadyToUse:
		return nil, fmt.Errorf("%w: %s: snapshot %s is not ready to use (being created, uploaded or deleted); retry once CreateSnapshot reports it ready",
			csi.ErrSnapshotNotReady, op, id)
	}
	if err := s.controllerCan(op, v.PluginID, "CREATE_DELETE_SNAPSHOT (needed to restore)", canSnapshot); err != nil {
		return nil, err
	}
	if err := atLeast(op, v, "snapshot "+id, snap.Size); err != nil {
		return nil, err
	}
	return &plugin.ContentSource{SnapshotID: snap.ExternalID}, nil
}

func (s *Server) cloneSource(op string, v *csi.Volume, id string) (*plugin.ContentSource, error) {
	src, err := s.store.Volume(v.Namespace, id)
	if err != nil {
		return nil, fmt.Errorf("%s: clone: %w", op, err)
	}
	switch {
	case src.PluginID != v.PluginID:
		return nil, fmt.Errorf("%w: %s: volume %s is of plugin %s, not %s", csi.ErrInvalidRequest, op, id, src.PluginID, v.PluginID)
	case src.Creating:
		return nil, fmt.Errorf("%w: %s: volume %s is still being created; complete its create first", csi.ErrVolumeInUse, op, id)
	}
	if err := s.controllerCan(op, v.PluginID, "CLONE_VOLUME", func(c csi.ControllerCapabilities) bool { return c.CloneVolume }); err != nil {
		return nil, err
	}
	if err := atLeast(op, v, "volume "+id, src.Capacity); err != nil {
		return nil, err
	}
	return &plugin.ContentSource{VolumeID: src.ExternalID}, nil
}

// atLeast makes v's requested capacity at least size bytes, the
// source's: a maximum below it is refused.
func atLeast(op string, v *csi.Volume, what string, size int64) error {
	if size <= 0 {
		return nil
	}
	if v.RequestedCapacityMax > 0 && v.RequestedCapacityMax < size {
		return fmt.Errorf("%w: %s: %s holds %d bytes, more than the requested maximum %d; ask for at least the source's size",
			csi.ErrInvalidRequest, op, what, size, v.RequestedCapacityMax)
	}
	v.RequestedCapacityMin = max(v.RequestedCapacityMin, size)
	return nil
}
