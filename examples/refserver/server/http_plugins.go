package server

import (
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s *Server) listPlugins(_ http.ResponseWriter, r *http.Request) ([]*csi.Plugin, uint64, error) {
	idx, err := s.waitIndex(r, state.TablePlugins)
	if err != nil {
		return nil, 0, err
	}
	ps, err := s.api.Plugins(r.Context())
	return orEmpty(ps), idx, err
}

func (s *Server) getPlugin(_ http.ResponseWriter, r *http.Request) (*csi.Plugin, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidatePluginID(id); err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TablePlugins)
	if err != nil {
		return nil, 0, err
	}
	p, err := s.api.Plugin(r.Context(), id)
	return p, idx, err
}
