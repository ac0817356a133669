package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

// release marks an allocation terminal: in the same store transaction
// its claims become past claims, and the claim release worker wakes.
func (s *Server) release(_ http.ResponseWriter, r *http.Request) (*api.ReleaseResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		return nil, 0, err
	}
	a, err := s.store().Allocation(id)
	if err != nil {
		return nil, 0, err
	}
	if err := s.authorize(r.Context(), a.Namespace, csi.PermVolumeClaim); err != nil {
		return nil, 0, fmt.Errorf("release allocation %s: %w", id, err)
	}
	idx := uint64(0)
	if !a.Terminal {
		a.Terminal = true
		res, err := s.applier().Apply(r.Context(), state.UpsertAllocations{Allocations: []csi.Allocation{*a}, ReleasedAt: s.now()})
		if err != nil {
			return nil, 0, err
		}
		idx = res.Index
	}
	claims, err := s.claimsOf(id)
	if err != nil {
		return nil, 0, err
	}
	if a, err = s.store().Allocation(id); err != nil {
		return nil, 0, err
	}
	names := make([]string, 0, len(claims))
	for _, c := range claims {
		names = append(names, c.Namespace+"/"+c.VolumeID)
	}
	what := "no claims to release"
	if len(names) > 0 {
		what = "releasing its claims on " + strings.Join(names, ", ")
	}
	s.cfg.Events.Printf("server", "allocation %s stopped: %s", id, what)
	return &api.ReleaseResponse{Allocation: a, Claims: claims, Index: idx}, idx, nil
}

// claimsOf lists an allocation's claims, live and past, from the volumes
// with a claim on its node (an index read).
func (s *Server) claimsOf(allocID string) ([]api.AllocationClaim, error) {
	a, err := s.store().Allocation(allocID)
	if err != nil {
		return nil, err
	}
	vols, err := s.store().VolumesByNode(a.NodeID)
	if err != nil {
		return nil, err
	}
	out := []api.AllocationClaim{}
	for _, v := range vols {
		if c := v.Claim(allocID); c != nil {
			out = append(out, api.AllocationClaim{Namespace: v.Namespace, VolumeID: v.ID, Claim: c})
		}
	}
	return out, nil
}

func (s *Server) allocationClaims(_ http.ResponseWriter, r *http.Request) ([]api.AllocationClaim, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	claims, err := s.claimsOf(id)
	if err != nil {
		return nil, 0, err
	}
	for _, c := range claims {
		if err := s.authorize(r.Context(), c.Namespace, csi.PermVolumeRead); err != nil {
			return nil, 0, fmt.Errorf("claims of allocation %s: %w", id, err)
		}
	}
	return claims, idx, nil
}
