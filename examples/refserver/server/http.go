package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

func (s *Server) routes() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/volumes", s.listVolumes)
	m.HandleFunc("GET /v1/volumes/{namespace}/{id}", s.getVolume)
	m.HandleFunc("PUT /v1/volumes/{namespace}/{id}", s.registerVolume)
	m.HandleFunc("POST /v1/volumes/{namespace}/{id}/create", s.createVolume)
	m.HandleFunc("DELETE /v1/volumes/{namespace}/{id}", s.deleteVolume)
	m.HandleFunc("POST /v1/volumes/{namespace}/{id}/claim", s.claimVolume)
	m.HandleFunc("GET /v1/plugins", s.listPlugins)
	m.HandleFunc("GET /v1/plugins/{id}", s.getPlugin)
	m.HandleFunc("POST /v1/allocations/{id}/release", s.release)
	m.HandleFunc("GET /v1/allocations/{id}/claims", s.allocationClaims)
	m.HandleFunc("GET /v1/nodes", s.listNodes)
	m.HandleFunc("PUT /v1/nodes/{id}", s.registerNode)
	m.HandleFunc("PUT /v1/nodes/{id}/heartbeat", s.heartbeat)
	m.HandleFunc("PUT /v1/nodes/{id}/plugins", s.reportPlugins)
	if s.cfg.Internal != nil {
		m.Handle(api.InternalPrefix, s.cfg.Internal)
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: no endpoint %s %s; see the api package doc for the endpoints", csi.ErrInvalidRequest, r.Method, r.URL.Path))
	})
	return m
}

func writeJSON(w http.ResponseWriter, status int, index uint64, v any) {
	w.Header().Set("Content-Type", "application/json")
	if index > 0 {
		w.Header().Set(api.IndexHeader, strconv.FormatUint(index, 10))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, api.StatusOf(err), 0, api.ErrorBody(err))
}

// decode reads a JSON body into v, refusing unknown fields (a typo must
// not pass silently) and anything after the value.
func decode(r *http.Request, w http.ResponseWriter, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s %s: the body is not a valid request: %v", csi.ErrInvalidRequest, r.Method, r.URL.Path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: %s %s: the body holds more than one JSON value", csi.ErrInvalidRequest, r.Method, r.URL.Path)
	}
	return nil
}

// waitIndex runs the blocking part of a read: with ?index=N it waits
// until table's index is above N, ?wait passes, the client goes away or
// the server stops. It returns the index to report, read before the
// data so that a change landing in between is seen by the next query.
func (s *Server) waitIndex(r *http.Request, table state.Table) (uint64, error) {
	q := r.URL.Query()
	if q.Has("index") {
		minIndex, err := strconv.ParseUint(q.Get("index"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: index %q is not a number", csi.ErrInvalidRequest, q.Get("index"))
		}
		wait := api.DefaultWait
		if q.Has("wait") {
			if wait, err = time.ParseDuration(q.Get("wait")); err != nil || wait < 0 {
				return 0, fmt.Errorf("%w: wait %q is not a duration such as 30s", csi.ErrInvalidRequest, q.Get("wait"))
			}
		}
		wait = min(wait, api.MaxWait)
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		unhook := context.AfterFunc(s.stopping, cancel)
		defer unhook()
		if _, err := s.store().Wait(ctx, table, minIndex); err != nil && r.Context().Err() != nil {
			return 0, err
		}
		// Timed out or stopping: answer with what there is.
	}
	return s.store().Index(table)
}

// pathIDs returns the namespace and ID of a volume path, validated.
func pathIDs(r *http.Request) (string, string, error) {
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	if err := csi.ValidateNamespace(ns); err != nil {
		return "", "", err
	}
	if err := csi.ValidateVolumeID(id); err != nil {
		return "", "", err
	}
	return ns, id, nil
}

// sameOrEmpty checks that a body field agrees with the path.
func sameOrEmpty(field, body, path string) error {
	if body != "" && body != path {
		return fmt.Errorf("%w: the body's %s %q differs from the path's %q", csi.ErrInvalidRequest, field, body, path)
	}
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := csi.ValidateNamespace(ns); err != nil {
			writeError(w, err)
			return
		}
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		writeError(w, err)
		return
	}
	vols, err := s.api.Volumes(r.Context(), ns, r.URL.Query().Get("prefix"))
	if err != nil {
		writeError(w, err)
		return
	}
	if vols == nil {
		vols = []*csi.Volume{}
	}
	writeJSON(w, http.StatusOK, idx, vols)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := pathIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		writeError(w, err)
		return
	}
	v, err := s.api.Volume(r.Context(), ns, id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, idx, v)
}

func (s *Server) registerVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := pathIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req rpcshim.VolumeRegisterRequest
	if err := decode(r, w, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := errors.Join(sameOrEmpty("namespace", req.Volume.Namespace, ns), sameOrEmpty("ID", req.Volume.ID, id)); err != nil {
		writeError(w, err)
		return
	}
	req.Volume.Namespace, req.Volume.ID = ns, id
	resp, err := s.api.RegisterVolume(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Events.Printf("server", "volume %s/%s registered: plugin %s, external ID %s", ns, id, resp.Volume.PluginID, resp.Volume.ExternalID)
	writeJSON(w, http.StatusOK, resp.Index, resp)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := pathIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req rpcshim.VolumeCreateRequest
	if err := decode(r, w, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := errors.Join(sameOrEmpty("namespace", req.Volume.Namespace, ns), sameOrEmpty("ID", req.Volume.ID, id)); err != nil {
		writeError(w, err)
		return
	}
	req.Volume.Namespace, req.Volume.ID = ns, id
	resp, err := s.api.CreateVolume(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	v := resp.Volume
	s.cfg.Events.Printf("server", "volume %s created by plugin %s on %s (controller), external ID %s",
		id, providerOr(v), resp.ControllerNodeID, v.ExternalID)
	writeJSON(w, http.StatusOK, resp.Index, resp)
}

func providerOr(v *csi.Volume) string {
	if v.Provider != "" {
		return v.Provider
	}
	return v.PluginID
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := pathIDs(r)
	if err != nil {
		writeError(w, err)
		return
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
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp.Index, api.WriteResponse{Index: resp.Index})
}

// claimVolume records the allocation, claims the volume through
// rpcshim.Server.Claim (claim first, then ControllerPublish for a new
// attachment) and, if asked, has the claim's node agent mount it.
func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := pathIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.ClaimRequest
	if err := decode(r, w, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := errors.Join(csi.ValidateAllocationID(req.AllocationID), csi.ValidateNodeID(req.NodeID)); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	vol, err := s.api.Volume(ctx, ns, id)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.AccessMode == csi.AccessModeUnknown && req.AttachmentMode == csi.AttachmentModeUnknown {
		if len(vol.Capabilities) != 1 {
			writeError(w, fmt.Errorf("%w: volume %s/%s allows %d capabilities (%v): name the access and attachment modes of the claim",
				csi.ErrInvalidRequest, ns, id, len(vol.Capabilities), vol.Capabilities))
			return
		}
		req.AccessMode, req.AttachmentMode = vol.Capabilities[0].AccessMode, vol.Capabilities[0].AttachmentMode
	}
	if err := s.placeAllocation(ctx, req.AllocationID, ns, req.NodeID); err != nil {
		writeError(w, err)
		return
	}
	resp, err := s.api.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: ns, VolumeID: id, Claim: csi.Claim{
		AllocationID: req.AllocationID, NodeID: req.NodeID, Mode: req.Mode,
		AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, MountOptions: req.MountOptions,
	}})
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.ClaimResponse{
		Namespace: ns, VolumeID: id, Claim: resp.Claim, Index: resp.Index,
		ControllerNodeID: resp.ControllerNodeID,
	}
	attached := ""
	if out.ControllerNodeID != "" {
		attached = "; attached by the controller on " + out.ControllerNodeID
	}
	s.cfg.Events.Printf("server", "volume %s claimed by %s on %s (%s, %s)%s",
		id, req.AllocationID, req.NodeID, req.Mode, resp.Claim.Capability(), attached)
	if req.Mount {
		s.cfg.Events.Printf("server", "asking %s to mount %s for %s", req.NodeID, id, req.AllocationID)
		var mr api.NodeMountResponse
		// resp.Volume holds the secrets the node plugin needs; it goes to
		// the claim's node only.
		err := s.transport.Call(ctx, req.NodeID, api.MethodMountVolume, &api.NodeMountRequest{Volume: resp.Volume, Claim: resp.Claim}, &mr)
		if err != nil {
			writeError(w, fmt.Errorf("volume %s is claimed by %s but node %s could not mount it (retry the claim, or release the allocation to undo it): %w",
				id, req.AllocationID, req.NodeID, err))
			return
		}
		out.Mount = &api.MountInfo{NodeID: req.NodeID, Path: mr.Path, Usage: mr.Usage}
	}
	writeJSON(w, http.StatusOK, out.Index, out)
}

// placeAllocation records a running allocation on node, unless it is
// already recorded there. A terminal allocation, or one on another node
// or namespace, is refused by the store.
func (s *Server) placeAllocation(ctx context.Context, allocID, ns, node string) error {
	a, err := s.store().Allocation(allocID)
	switch {
	case err == nil && !a.Terminal && a.NodeID == node && a.Namespace == ns:
		return nil
	case err != nil && !errors.Is(err, csi.ErrAllocationNotFound):
		return err
	}
	_, err = s.applier().Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: allocID, Namespace: ns, NodeID: node}}})
	if err != nil {
		return fmt.Errorf("place allocation %s on node %s: %w", allocID, node, err)
	}
	s.cfg.Events.Printf("server", "allocation %s placed on %s", allocID, node)
	return nil
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request) {
	idx, err := s.waitIndex(r, state.TablePlugins)
	if err != nil {
		writeError(w, err)
		return
	}
	ps, err := s.api.Plugins(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if ps == nil {
		ps = []*csi.Plugin{}
	}
	writeJSON(w, http.StatusOK, idx, ps)
}

func (s *Server) getPlugin(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := csi.ValidatePluginID(id); err != nil {
		writeError(w, err)
		return
	}
	idx, err := s.waitIndex(r, state.TablePlugins)
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := s.api.Plugin(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, idx, p)
}

// release marks an allocation terminal: in the same store transaction
// its claims become past claims, and the claim release worker wakes.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		writeError(w, err)
		return
	}
	a, err := s.store().Allocation(id)
	if err != nil {
		writeError(w, err)
		return
	}
	idx := uint64(0)
	if !a.Terminal {
		a.Terminal = true
		res, err := s.applier().Apply(r.Context(), state.UpsertAllocations{Allocations: []csi.Allocation{*a}, ReleasedAt: s.now()})
		if err != nil {
			writeError(w, err)
			return
		}
		idx = res.Index
	}
	claims, err := s.claimsOf(id)
	if err != nil {
		writeError(w, err)
		return
	}
	if a, err = s.store().Allocation(id); err != nil {
		writeError(w, err)
		return
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
	writeJSON(w, http.StatusOK, idx, api.ReleaseResponse{Allocation: a, Claims: claims, Index: idx})
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

func (s *Server) allocationClaims(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := csi.ValidateAllocationID(id); err != nil {
		writeError(w, err)
		return
	}
	idx, err := s.waitIndex(r, state.TableVolumes)
	if err != nil {
		writeError(w, err)
		return
	}
	claims, err := s.claimsOf(id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, idx, claims)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	out := []*api.Node{}
	for _, n := range s.live.Nodes(s.now()) {
		node := &api.Node{ID: n.ID, Address: n.Address, Status: n.Status, LastHeartbeat: n.LastHeartbeat}
		if rec, err := s.store().Node(n.ID); err == nil {
			node.Plugins = rec.Plugins
		}
		out = append(out, node)
	}
	writeJSON(w, http.StatusOK, 0, out)
}

func (s *Server) registerNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req api.RegisterNodeRequest
	if err := decode(r, w, &req); err != nil {
		writeError(w, err)
		return
	}
	changed, err := s.live.Register(id, req.Address, s.now())
	if err != nil {
		writeError(w, err)
		return
	}
	if changed {
		s.cfg.Events.Printf("server", "node %s registered, node service at %s", id, req.Address)
	}
	idx, err := s.placePluginAllocations(r.Context(), id, req.Plugins)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, idx, api.WriteResponse{Index: idx})
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
	plugins, err := s.store().Plugins()
	if err != nil {
		return 0, err
	}
	var stale []csi.Allocation
	var forget []string
	seen := map[string]bool{}
	for _, p := range plugins {
		for _, pa := range p.Allocations {
			if pa.NodeID != node || want[pa.AllocationID] != nil || seen[pa.AllocationID] {
				continue
			}
			seen[pa.AllocationID] = true
			if a, err := s.store().Allocation(pa.AllocationID); err == nil && !a.Terminal {
				a.Terminal = true
				stale = append(stale, *a)
				forget = append(forget, a.ID)
			}
		}
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

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	if err := s.live.Heartbeat(r.PathValue("id"), s.now()); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, 0, api.WriteResponse{})
}

// reportPlugins takes a node's fingerprints (fingerprint.Manager's
// Report on the agent) and applies them as state.UpsertNodePlugins.
func (s *Server) reportPlugins(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
		writeError(w, err)
		return
	}
	var req api.ReportPluginsRequest
	if err := decode(r, w, &req); err != nil {
		writeError(w, err)
		return
	}
	if _, err := s.live.Address(id); err != nil {
		writeError(w, fmt.Errorf("%w: node %s reported plugins before registering; register it first", csi.ErrNodeNotFound, id))
		return
	}
	cmd := state.UpsertNodePlugins{NodeID: id}
	for i, p := range req.Plugins {
		if p == nil {
			writeError(w, fmt.Errorf("%w: node %s: plugin report %d is null", csi.ErrInvalidRequest, id, i))
			return
		}
		cmd.Plugins = append(cmd.Plugins, *p)
	}
	var before []*csi.PluginInfo
	if n, err := s.store().Node(id); err == nil {
		before = n.Plugins
	}
	res, err := s.applier().Apply(r.Context(), cmd)
	if err != nil {
		writeError(w, err)
		return
	}
	s.printPluginChanges(id, before, req.Plugins)
	writeJSON(w, http.StatusOK, res.Index, api.WriteResponse{Index: res.Index})
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
