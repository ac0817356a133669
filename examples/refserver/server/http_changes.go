package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/csikit/csikit/csi"
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
// the step stays pending and the next report tries again. It runs as
// the server (asServer): the node or the token behind the request that
// led here was authorized for that request, not for this.
func (s *Server) completeNodeExpansions(ctx context.Context, node string) {
	if err := s.api.CompleteNodeExpansions(asServer(ctx), node); err != nil {
		s.cfg.Events.Printf("server", "node %s: a volume expansion is still pending there: %v", node, err)
	}
}

// resumeVolumeChanges finishes the expansions and modifies an earlier
// leader (or an earlier run) left pending. The health runner calls it at
// the start of every term in which this server leads, as the server.
func (s *Server) resumeVolumeChanges(ctx context.Context) {
	if err := s.api.ResumeVolumeChanges(asServer(ctx)); err != nil && ctx.Err() == nil {
		s.cfg.Events.Printf("server", "volume changes left pending by an earlier run are still pending: %v", err)
	}
}

// nodeExpandedAtMount records the node step a mount ran when it staged
// v on node (capacity > 0), so that completeNodeExpansions does not send
// NodeExpandVolume again. A failure is an event: the step stays pending
// and completeNodeExpansions runs it, which the plugin answers
// idempotently.
func (s *Server) nodeExpandedAtMount(ctx context.Context, v *csi.Volume, node string, capacity int64) {
	if capacity <= 0 || v == nil || v.Expansion == nil {
		return
	}
	err := s.api.NodeExpandedAtMount(asServer(ctx), &rpcshim.NodeExpandedRequest{
		Namespace: v.Namespace, VolumeID: v.ID, NodeID: node,
		RequiredBytes: v.Expansion.RequiredBytes, LimitBytes: v.Expansion.LimitBytes, Capacity: capacity,
	})
	if err != nil {
		s.cfg.Events.Printf("server", "node %s expanded volume %s/%s at mount, but recording it failed: %v", node, v.Namespace, v.ID, err)
	}
}
