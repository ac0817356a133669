package server

import (
	"net/http"

	"github.com/csikit/csikit/state"
)

// listHealth answers GET /v1/health: every health record the monitor
// wrote (a volume without one is healthy, or not checked yet).
func (s *Server) listHealth(_ http.ResponseWriter, r *http.Request) ([]*state.VolumeHealth, uint64, error) {
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	hs, err := s.store().Healths()
	return orEmpty(hs), idx, err
}

// getHealth answers GET /v1/volumes/{namespace}/{id}/health: the
// volume's record, or null when it has none.
func (s *Server) getHealth(_ http.ResponseWriter, r *http.Request) (*state.VolumeHealth, uint64, error) {
	ns, id, err := pathIDs(r)
	if err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	h, err := s.store().Health(ns, id)
	return h, idx, err
}
