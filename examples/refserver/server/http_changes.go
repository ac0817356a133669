package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/csikit/csikit/rpcshim"
)

// expandVolume grows a volume through rpcshim.Server.ExpandVolume.
func (s *Server) expandVolume(w http.ResponseWriter, r *http.Request) (*rpcshim.VolumeChangeResponse, uint64, error) {
	ns, id, req, err := volumeRequest[rpcshim.VolumeExpandRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := errors.Join(sameOrEmpty("namespace", req.Namespace, ns), sameOrEmpty("volume ID", req.VolumeID, id)); err != nil {
		return nil, 0, err
	}
	req.Namespace, req.VolumeID = ns, id
	resp, err := s.api.ExpandVolume(r.Context(), req)
	if err != nil {
		return nil, 0, err
	}
	v := resp.Volume
	s.cfg.Events.Printf("server", "volume %s/%s expanded to %d bytes (%s); node step pending on %v", ns, id, v.Capacity, v.Expansion.State, resp.PendingNodes)
	return resp, v.ModifyIndex, nil
}

// modifyVolume changes a volume's mutable parameters through
// rpcshim.Server.ModifyVolume.
func (s *Server) modifyVolume(w http.ResponseWriter, r *http.Request) (*rpcshim.VolumeChangeResponse, uint64, error) {
	ns, id, req, err := volumeRequest[rpcshim.VolumeModifyRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := errors.Join(sameOrEmpty("namespace", req.Namespace, ns), sameOrEmpty("volume ID", req.VolumeID, id)); err != nil {
		return nil, 0, err
	}
	req.Namespace, req.VolumeID = ns, id
	resp, err := s.api.ModifyVolume(r.Context(), req)
	if err != nil {
		return nil, 0, err
	}
	s.cfg.Events.Printf("server", "volume %s/%s modified: mutable parameters %v", ns, id, resp.Volume.MutableParameters)
	return resp, resp.Volume.ModifyIndex, nil
}

// completeNodeExpansions runs the node expansions node still owes: after
// it reports its plugins (it may be back from being down) and after it
// mounts a volume. A failure is an event, not an error of the caller:
// the step stays pending and the next report tries again.
func (s *Server) completeNodeExpansions(ctx context.Context, node string) {
	if err := s.api.CompleteNodeExpansions(ctx, node); err != nil {
		s.cfg.Events.Printf("server", "node %s: a volume expansion is still pending there: %v", node, err)
	}
}

// resumeVolumeChanges finishes the expansions and modifies an earlier
// leader (or an earlier run) left pending. The health runner calls it at
// the start of every term in which this server leads.
func (s *Server) resumeVolumeChanges(ctx context.Context) {
	if err := s.api.ResumeVolumeChanges(ctx); err != nil && ctx.Err() == nil {
		s.cfg.Events.Printf("server", "volume changes left pending by an earlier run are still pending: %v", err)
	}
}
