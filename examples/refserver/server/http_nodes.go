package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

func (s *Server) listNodes(http.ResponseWriter, *http.Request) ([]*api.Node, uint64, error) {
	out := []*api.Node{}
	for _, n := range s.live.Nodes(s.now()) {
		node := &api.Node{ID: n.ID, Address: n.Address, Status: n.Status, LastHeartbeat: n.LastHeartbeat}
		if rec, err := s.store().Node(n.ID); err == nil {
			node.Plugins = rec.Plugins
		}
		out = append(out, node)
	}
	return out, 0, nil
}

func (s *Server) registerNode(w http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	var req api.RegisterNodeRequest
	if err := decode(r, w, &req); err != nil {
		return api.WriteResponse{}, 0, err
	}
	if err := csi.ValidateNodeID(id); err != nil {
		return api.WriteResponse{}, 0, err
	}
	if err := s.registerIdentity(r.Context(), r, id, req.Address); err != nil {
		return api.WriteResponse{}, 0, err
	}
	changed, err := s.live.Register(id, req.Address, s.now())
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	if changed {
		s.cfg.Events.Printf("server", "node %s registered, node service at %s", id, req.Address)
	}
	idx, err := s.placePluginAllocations(r.Context(), id, req.Plugins)
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	return api.WriteResponse{Index: idx}, idx, nil
}

// placePluginAllocations records the plugin instances a node runs as
// running allocations on it, so that the plugins' expected counts
// include them, and stops and forgets the plugin allocations the node
// ran before and no longer lists. It writes one batch, or nothing when
// the store already agrees.
func (s *Server) placePluginAllocations(ctx context.Context, node string, insts []api.PluginInstance) (uint64, error) {
	want := map[string]*csi.Allocation{}
	for _, in := range insts {
		if err := errors.Join(csi.ValidatePluginID(in.PluginID), csi.ValidateAllocationID(in.AllocationID)); err != nil {
			return 0, fmt.Errorf("node %s: plugin instance: %w", node, err)
		}
		if !in.Type.Valid() {
			return 0, fmt.Errorf("%w: node %s: plugin %s has type %q, not controller, node or monolith", csi.ErrInvalidRequest, node, in.PluginID, in.Type)
		}
		a := want[in.AllocationID]
		if a == nil {
			a = &csi.Allocation{ID: in.AllocationID, Namespace: api.PluginNamespace, NodeID: node}
			want[in.AllocationID] = a
		}
		a.Plugins = append(a.Plugins, csi.AllocPlugin{PluginID: in.PluginID, Type: in.Type})
	}
	// The node's plugin allocations that it no longer lists: stopped
	// and forgotten. Workload allocations on the node are not the
	// agent's to report, and stay.
	onNode, err := s.store().AllocationsByNode(node)
	if err != nil {
		return 0, err
	}
	var stale []csi.Allocation
	var forget []string
	for _, a := range onNode {
		if a.Namespace != api.PluginNamespace || len(a.Plugins) == 0 || want[a.ID] != nil || a.Terminal {
			continue
		}
		a.Terminal = true
		stale = append(stale, *a)
		forget = append(forget, a.ID)
	}
	var place []csi.Allocation
	for _, id := range sortedKeys(want) {
		a := want[id]
		old, err := s.store().Allocation(id)
		switch {
		case err == nil && old.Terminal:
			forget = append(forget, id) // a plugin dropped earlier and listed again
		case err == nil && old.NodeID == node && old.Namespace == a.Namespace && samePlugins(old.Plugins, a.Plugins):
			continue
		case err != nil && !errors.Is(err, csi.ErrAllocationNotFound):
			return 0, err
		}
		place = append(place, *a)
	}
	var cmds []state.Command
	if len(stale) > 0 {
		cmds = append(cmds, state.UpsertAllocations{Allocations: stale, ReleasedAt: s.now()})
	}
	if len(forget) > 0 {
		cmds = append(cmds, state.DeleteAllocations{AllocationIDs: forget})
	}
	if len(place) > 0 {
		cmds = append(cmds, state.UpsertAllocations{Allocations: place})
	}
	if len(cmds) == 0 {
		return 0, nil
	}
	res, err := s.applier().Apply(ctx, state.Batch{Commands: cmds})
	if err != nil {
		return 0, fmt.Errorf("node %s: record its plugin allocations: %w", node, err)
	}
	return res.Index, nil
}

func samePlugins(a, b []csi.AllocPlugin) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(p csi.AllocPlugin) string { return p.PluginID + "/" + string(p.Type) }
	have := map[string]bool{}
	for _, p := range a {
		have[key(p)] = true
	}
	for _, p := range b {
		if !have[key(p)] {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func (s *Server) heartbeat(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
		return api.WriteResponse{}, 0, err
	}
	if err := s.checkNodeSecret(id, nodeSecretHash(r)); err != nil {
		s.refused(r, id, err)
		return api.WriteResponse{}, 0, err
	}
	return api.WriteResponse{}, 0, s.live.Heartbeat(id, s.now())
}

// leave takes a node agent's clean stop: the node is down at once.
func (s *Server) leave(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
		return api.WriteResponse{}, 0, err
	}
	if err := s.checkNodeSecret(id, nodeSecretHash(r)); err != nil {
		s.refused(r, id, err)
		return api.WriteResponse{}, 0, err
	}
	if s.live.Leave(id) {
		s.cfg.Events.Printf("server", "node %s left: its agent stopped; the node is down until it registers again", id)
	}
	return api.WriteResponse{}, 0, nil
}

// reportPlugins takes a node's fingerprints (fingerprint.Manager's
// Report on the agent) and applies them as state.UpsertNodePlugins.
func (s *Server) reportPlugins(w http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
		return api.WriteResponse{}, 0, err
	}
	var req api.ReportPluginsRequest
	if err := decode(r, w, &req); err != nil {
		return api.WriteResponse{}, 0, err
	}
	if _, err := s.live.Address(id); err != nil {
		return api.WriteResponse{}, 0, fmt.Errorf("%w: node %s reported plugins before registering; register it first", csi.ErrNodeNotFound, id)
	}
	cmd := state.UpsertNodePlugins{NodeID: id, SecretHash: nodeSecretHash(r)}
	for i, p := range req.Plugins {
		if p == nil {
			return api.WriteResponse{}, 0, fmt.Errorf("%w: node %s: plugin report %d is null", csi.ErrInvalidRequest, id, i)
		}
		cmd.Plugins = append(cmd.Plugins, *p)
	}
	var before []*csi.PluginInfo
	if n, err := s.store().Node(id); err == nil {
		before = n.Plugins
	}
	res, err := s.applier().Apply(r.Context(), cmd)
	if err != nil {
		s.refused(r, id, err)
		return api.WriteResponse{}, 0, err
	}
	s.printPluginChanges(id, before, req.Plugins)
	s.completeNodeExpansions(r.Context(), id)
	return api.WriteResponse{Index: res.Index}, res.Index, nil
}

// printPluginChanges prints a line per plugin instance that appeared,
// changed health or went away on a node.
func (s *Server) printPluginChanges(node string, before, after []*csi.PluginInfo) {
	key := func(p *csi.PluginInfo) string { return p.PluginID + "/" + string(p.Type) }
	old := make(map[string]*csi.PluginInfo, len(before))
	for _, p := range before {
		old[key(p)] = p
	}
	for _, p := range after {
		prev, seen := old[key(p)]
		delete(old, key(p))
		if seen && prev.Healthy == p.Healthy {
			continue
		}
		if p.Healthy {
			s.cfg.Events.Printf("server", "node %s: plugin %s (%s) healthy, %s %s", node, p.PluginID, p.Type, p.Provider, p.ProviderVersion)
		} else {
			s.cfg.Events.Printf("server", "node %s: plugin %s (%s) unhealthy: %s", node, p.PluginID, p.Type, p.HealthDescription)
		}
	}
	for _, p := range old {
		s.cfg.Events.Printf("server", "node %s: plugin %s (%s) gone", node, p.PluginID, p.Type)
	}
}

// deleteNode answers DELETE /v1/nodes/{id}, an operator's call: the
// node, its secret and its plugin instances are forgotten
// (state.DeleteNode) and so is its liveness, so that a node whose
// secret was lost can register again. Claims on the node stay for the
// claim release worker.
func (s *Server) deleteNode(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
		return api.WriteResponse{}, 0, err
	}
	res, err := s.applier().Apply(r.Context(), state.DeleteNode{NodeID: id})
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	s.live.Forget(id)
	s.cfg.Events.Printf("server", "node %s deleted by an operator; it may register again with a new secret", id)
	return api.WriteResponse{Index: res.Index}, res.Index, nil
}
