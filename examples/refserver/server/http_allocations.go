package server

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

// release marks an allocation terminal: in the same store transaction
// its claims become past claims, and the claim release worker wakes.
// The route's guard has asked for the claim permission in the
// namespace the caller names before this runs, so a caller without it
// is refused the same way whether the allocation exists or not.
func (s *Server) release(_ http.ResponseWriter, r *http.Request) (*api.ReleaseResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		return nil, 0, err
	}
	ns := cmp.Or(r.URL.Query().Get("namespace"), api.DefaultNamespace)
	if err := csi.ValidateNamespace(ns); err != nil {
		return nil, 0, err
	}
	a, err := s.allocationIn(ns, id)
	if err != nil {
		return nil, 0, err
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
	if a, err = s.store().Allocation(id); err != nil {
		return nil, 0, err
	}
	claims, err := s.claimsOf(a)
	if err != nil {
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

// allocationIn reads allocation id of namespace ns. One of another
// namespace is not found: the caller may act in ns only, and must not
// learn what the other namespaces hold.
func (s *Server) allocationIn(ns, id string) (*csi.Allocation, error) {
	a, err := s.store().Allocation(id)
	if errors.Is(err, csi.ErrAllocationNotFound) || (err == nil && a.Namespace != ns) {
		// One text for both, so the answer tells nothing apart.
		return nil, fmt.Errorf("%w: no allocation %s in namespace %s; pass the allocation's namespace", csi.ErrAllocationNotFound, id, ns)
	}
	return a, err
}

// claimsOf lists an allocation's claims, live and past, from the volumes
// with a claim on its node (an index read).
func (s *Server) claimsOf(a *csi.Allocation) ([]api.AllocationClaim, error) {
	vols, err := s.store().VolumesByNode(a.NodeID)
	if err != nil {
		return nil, err
	}
	out := []api.AllocationClaim{}
	for _, v := range vols {
		if c := v.Claim(a.ID); c != nil {
			out = append(out, api.AllocationClaim{Namespace: v.Namespace, VolumeID: v.ID, Claim: c})
		}
	}
	return out, nil
}

// allocationClaims answers GET /v1/allocations/{id}/claims?namespace=:
// authorized on the namespace before the allocation is read, like
// release.
func (s *Server) allocationClaims(_ http.ResponseWriter, r *http.Request) ([]api.AllocationClaim, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		return nil, 0, err
	}
	ns := cmp.Or(r.URL.Query().Get("namespace"), api.DefaultNamespace)
	if err := csi.ValidateNamespace(ns); err != nil {
		return nil, 0, err
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	a, err := s.allocationIn(ns, id)
	if err != nil {
		return nil, 0, err
	}
	claims, err := s.claimsOf(a)
	return claims, idx, err
}
