package rpcshim

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// FeasibilityRequest asks which nodes can take a claim on a volume
// before the host places the allocation: the volume, the claim to place
// (its Namespace is the allocation's) and the candidate nodes by host
// node ID, nil for every node the volume's plugin has a node instance
// on.
type FeasibilityRequest struct {
	Namespace string
	VolumeID  string
	Claim     csi.PlacementRequest
	Nodes     []string `json:",omitempty"`
}

// FeasibilityResponse is the answer for every candidate node, sorted by
// node ID. A host sends it over its transport as JSON: Reasons marshal
// as text ("topology,max-volumes"; "feasible" for none), so the other
// side unmarshals them into csi.Reasons again and branches with Has.
type FeasibilityResponse struct {
	// VolumeTopologies are where the volume is accessible from (empty:
	// wherever its plugin runs).
	VolumeTopologies []*csi.Topology `json:",omitempty"`
	Nodes            []NodeFeasibility
}

// NodeFeasibility is the answer for one candidate node.
type NodeFeasibility struct {
	NodeID string
	// Reasons is empty when the node can take the claim; otherwise the
	// claim would be refused with the Sentinel of one of them.
	Reasons csi.Reasons
	// Topology is the node instance's accessible topology, nil when
	// the node has no node instance of the plugin or it reports none.
	Topology *csi.Topology `json:",omitempty"`
}

// Feasible returns the IDs of the nodes that can take the claim, in
// node order.
func (r *FeasibilityResponse) Feasible() []string {
	var ids []string
	for _, n := range r.Nodes {
		if n.Reasons == 0 {
			ids = append(ids, n.NodeID)
		}
	}
	return ids
}

// Feasibility answers which of the candidate nodes can take the claim
// of req and, for each other one, why not (see state.PlacementReader):
// the reasons agree with the claim transaction on the same state. It
// is a read and takes no volume lock; the volume and plugin topologies
// in the response are read beside the feasibility query, for display,
// and may be a write newer. An unknown volume matches
// csi.ErrVolumeNotFound; an invalid namespace or volume ID
// csi.ErrInvalidRequest.
//
// A scheduler in-process with the store that calls this in its inner
// loop should call the store's Feasibility directly with a reused
// slice: this endpoint builds a response the caller owns.
func (s *Server) Feasibility(ctx context.Context, req *FeasibilityRequest) (*FeasibilityResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: feasibility: nil request", csi.ErrInvalidRequest)
	}
	op := fmt.Sprintf("feasibility of volume %s/%s", req.Namespace, req.VolumeID)
	if err := s.authorize(ctx, op, req.Namespace, csi.PermVolumeRead); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nodes, err := s.store.Feasibility(&state.FeasibilityRequest{
		Namespace: req.Namespace, VolumeID: req.VolumeID, Claim: req.Claim, Nodes: req.Nodes,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	v, err := s.store.Volume(req.Namespace, req.VolumeID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	resp := &FeasibilityResponse{VolumeTopologies: v.Topologies, Nodes: make([]NodeFeasibility, len(nodes))}
	p, err := s.store.Plugin(v.PluginID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for i, n := range nodes {
		resp.Nodes[i] = NodeFeasibility{NodeID: n.NodeID, Reasons: n.Reasons}
		if in := p.Nodes[n.NodeID]; in != nil && in.NodeInfo != nil {
			resp.Nodes[i].Topology = in.NodeInfo.AccessibleTopology
		}
	}
	return resp, nil
}

// accessibilityRequirements builds the CSI accessibility_requirements
// of a volume to be created by plugin p on the candidate nodes (empty:
// every node p has a node instance on), or nil when p does not
// advertise VOLUME_ACCESSIBILITY_CONSTRAINTS or no candidate has a
// healthy node instance with a topology. See VolumeCreateRequest for
// the rule.
func accessibilityRequirements(p *csi.Plugin, candidates []string, name string) *csi.TopologyRequest {
	if !requiresTopologies(p) {
		return nil
	}
	var tops []*csi.Topology
	add := func(in *csi.PluginInfo) {
		if in == nil || !in.Healthy || in.NodeInfo == nil {
			return
		}
		t := in.NodeInfo.AccessibleTopology
		if t == nil || len(t.Segments) == 0 {
			return
		}
		if !slices.ContainsFunc(tops, t.Equal) {
			tops = append(tops, t.Copy())
		}
	}
	if len(candidates) == 0 {
		for _, in := range p.Nodes {
			add(in)
		}
	} else {
		for _, id := range candidates {
			add(p.Nodes[id])
		}
	}
	if len(tops) == 0 {
		return nil
	}
	slices.SortFunc(tops, func(a, b *csi.Topology) int { return cmp.Compare(a.String(), b.String()) })
	h := fnv.New32a()
	h.Write([]byte(name))
	k := int(h.Sum32() % uint32(len(tops)))
	preferred := make([]*csi.Topology, 0, len(tops))
	for i := range tops {
		preferred = append(preferred, tops[(k+i)%len(tops)].Copy())
	}
	return &csi.TopologyRequest{Required: tops, Preferred: preferred}
}

// requiresTopologies reports whether any instance of p advertises
// VOLUME_ACCESSIBILITY_CONSTRAINTS.
func requiresTopologies(p *csi.Plugin) bool {
	for _, m := range []map[string]*csi.PluginInfo{p.Controllers, p.Nodes} {
		for _, in := range m {
			if in.RequiresTopologies {
				return true
			}
		}
	}
	return false
}
