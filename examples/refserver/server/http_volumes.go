package server

import (
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

func (s *Server) listVolumes(_ http.ResponseWriter, r *http.Request) ([]*csi.Volume, uint64, error) {
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := csi.ValidateNamespace(ns); err != nil {
			return nil, 0, err
		}
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	vols, err := s.api.Volumes(r.Context(), ns, r.URL.Query().Get("prefix"))
	return orEmpty(vols), idx, err
}

func (s *Server) getVolume(_ http.ResponseWriter, r *http.Request) (*csi.Volume, uint64, error) {
	ns, id, err := pathIDs(r)
	if err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	v, err := s.api.Volume(r.Context(), ns, id)
	return v, idx, err
}

func (s *Server) registerVolume(w http.ResponseWriter, r *http.Request) (*rpcshim.VolumeResponse, uint64, error) {
	ns, id, req, err := volumeRequest[rpcshim.VolumeRegisterRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := volumeAtPath(&req.Volume, ns, id); err != nil {
		return nil, 0, err
	}
	resp, err := s.api.RegisterVolume(r.Context(), req)
	if err != nil {
		return nil, 0, err
	}
	s.cfg.Events.Printf("server", "volume %s/%s registered: plugin %s, external ID %s", ns, id, resp.Volume.PluginID, resp.Volume.ExternalID)
	return resp, resp.Index, nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) (*rpcshim.VolumeResponse, uint64, error) {
	ns, id, req, err := volumeRequest[rpcshim.VolumeCreateRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := volumeAtPath(&req.Volume, ns, id); err != nil {
		return nil, 0, err
	}
	resp, err := s.api.CreateVolume(r.Context(), req)
	if err != nil {
		return nil, 0, err
	}
	v := resp.Volume
	s.cfg.Events.Printf("server", "volume %s created by plugin %s on %s (controller), external ID %s",
		id, providerOr(v), resp.ControllerNodeID, v.ExternalID)
	return resp, resp.Index, nil
}

func providerOr(v *csi.Volume) string {
	if v.Provider != "" {
		return v.Provider
	}
	return v.PluginID
}

func (s *Server) deleteVolume(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	ns, id, err := pathIDs(r)
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	q := r.URL.Query()
	var resp *rpcshim.WriteResponse
	if q.Get("deregister") == "true" {
		force := q.Get("force") == "true"
		resp, err = s.api.DeregisterVolume(r.Context(), &rpcshim.VolumeDeregisterRequest{Namespace: ns, VolumeID: id, Force: force})
		if err == nil {
			s.cfg.Events.Printf("server", "volume %s/%s deregistered (force %t)", ns, id, force)
		}
	} else {
		resp, err = s.api.DeleteVolume(r.Context(), &rpcshim.VolumeDeleteRequest{Namespace: ns, VolumeID: id})
		if err == nil && resp.ControllerNodeID != "" {
			s.cfg.Events.Printf("server", "volume %s/%s deleted by the controller on %s and deregistered", ns, id, resp.ControllerNodeID)
		} else if err == nil {
			s.cfg.Events.Printf("server", "volume %s/%s deregistered (its plugin no longer had it)", ns, id)
		}
	}
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	return api.WriteResponse{Index: resp.Index}, resp.Index, nil
}

// claimVolume records the allocation, claims the volume through
// rpcshim.Server.Claim (claim first, then ControllerPublish for a new
// attachment) and, if asked, has the claim's node agent mount it.
