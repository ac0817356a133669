package server

import (
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// snapshotPath returns the namespace and snapshot ID of a snapshot
// path, validated.
func snapshotPath(r *http.Request) (string, string, error) {
	ns, id := r.PathValue("namespace"), r.PathValue("snapshot")
	if err := csi.ValidateNamespace(ns); err != nil {
		return "", "", err
	}
	if err := csi.ValidateSnapshotID(id); err != nil {
		return "", "", err
	}
	return ns, id, nil
}

// createSnapshot snapshots the volume of the path under the snapshot ID
// of the path (rpcshim.Server.CreateSnapshot).
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) (*rpcshim.SnapshotResponse, uint64, error) {
	ns, vol, req, err := volumeRequest[api.SnapshotCreateBody](w, r)
	if err != nil {
		return nil, 0, err
	}
	id := r.PathValue("snapshot")
	if err := csi.ValidateSnapshotID(id); err != nil {
		return nil, 0, err
	}
	resp, err := s.api.CreateSnapshot(r.Context(), &rpcshim.SnapshotCreateRequest{
		Namespace: ns, VolumeID: vol, SnapshotID: id, Parameters: req.Parameters, Secrets: req.Secrets,
	})
	if err != nil {
		return nil, 0, err
	}
	s.cfg.Events.Printf("server", "snapshot %s/%s of volume %s created by plugin %s (external ID %s, %d bytes)",
		ns, id, vol, resp.Snapshot.PluginID, resp.Snapshot.ExternalID, resp.Snapshot.Size)
	return resp, resp.Index, nil
}

func (s *Server) listSnapshots(_ http.ResponseWriter, r *http.Request) ([]*csi.Snapshot, uint64, error) {
	q := r.URL.Query()
	ns, vol := q.Get("namespace"), q.Get("volume")
	if ns != "" {
		if err := csi.ValidateNamespace(ns); err != nil {
			return nil, 0, err
		}
	}
	if vol != "" {
		if ns == "" {
			ns = api.DefaultNamespace
		}
		if err := csi.ValidateVolumeID(vol); err != nil {
			return nil, 0, err
		}
	}
	idx, err := s.waitIndex(r, state.TableVolumes) // snapshots raise the volume table's index
	if err != nil {
		return nil, 0, err
	}
	snaps, err := s.api.ListSnapshots(r.Context(), ns, vol)
	return orEmpty(snaps), idx, err
}

func (s *Server) getSnapshot(_ http.ResponseWriter, r *http.Request) (*csi.Snapshot, uint64, error) {
	ns, id, err := snapshotPath(r)
	if err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	snap, err := s.api.Snapshot(r.Context(), ns, id)
	return snap, idx, err
}

func (s *Server) deleteSnapshot(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	ns, id, err := snapshotPath(r)
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	resp, err := s.api.DeleteSnapshot(r.Context(), &rpcshim.SnapshotDeleteRequest{Namespace: ns, SnapshotID: id})
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	s.cfg.Events.Printf("server", "snapshot %s/%s deleted", ns, id)
	return api.WriteResponse{Index: resp.Index}, resp.Index, nil
}
