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
	m.HandleFunc("GET /v1/volumes", handle(s.listVolumes))
	m.HandleFunc("GET /v1/volumes/{namespace}/{id}", handle(s.getVolume))
	m.HandleFunc("PUT /v1/volumes/{namespace}/{id}", handle(s.registerVolume))
	m.HandleFunc("POST /v1/volumes/{namespace}/{id}/create", handle(s.createVolume))
	m.HandleFunc("DELETE /v1/volumes/{namespace}/{id}", handle(s.deleteVolume))
	m.HandleFunc("POST /v1/volumes/{namespace}/{id}/claim", handle(s.claimVolume))
	m.HandleFunc("POST /v1/volumes/{namespace}/{id}/place", handle(s.placeVolume))
	m.HandleFunc("GET /v1/plugins", handle(s.listPlugins))
	m.HandleFunc("GET /v1/plugins/{id}", handle(s.getPlugin))
	m.HandleFunc("POST /v1/allocations/{id}/release", handle(s.release))
	m.HandleFunc("GET /v1/allocations/{id}/claims", handle(s.allocationClaims))
	m.HandleFunc("GET /v1/nodes", handle(s.listNodes))
	m.HandleFunc("PUT /v1/nodes/{id}", handle(s.registerNode))
	m.HandleFunc("PUT /v1/nodes/{id}/heartbeat", handle(s.heartbeat))
	m.HandleFunc("DELETE /v1/nodes/{id}/heartbeat", handle(s.leave))
	m.HandleFunc("PUT /v1/nodes/{id}/plugins", handle(s.reportPlugins))
	if s.cfg.Internal != nil {
		m.Handle(api.InternalPrefix, s.cfg.Internal)
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: no endpoint %s %s; see the api package doc for the endpoints", csi.ErrInvalidRequest, r.Method, r.URL.Path))
	})
	return m
}

// handle turns fn, the part of a handler specific to its endpoint, into
// an http.HandlerFunc: an error from fn is written with its status
// (api.StatusOf), anything else as 200 with fn's body and, when above 0,
// its index in the index header. fn gets w only to bound the body it
// decodes (see decode).
func handle[Resp any](fn func(w http.ResponseWriter, r *http.Request) (Resp, uint64, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, index, err := fn(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, index, resp)
	}
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
		go func() {
			select {
			case <-s.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
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

// volumeRequest reads a request on one volume: the path's namespace and ID,
// validated, then the JSON body as a Req.
func volumeRequest[Req any](w http.ResponseWriter, r *http.Request) (ns, id string, req *Req, err error) {
	if ns, id, err = pathIDs(r); err != nil {
		return "", "", nil, err
	}
	req = new(Req)
	if err := decode(r, w, req); err != nil {
		return "", "", nil, err
	}
	return ns, id, req, nil
}

// volumeAtPath checks that the namespace and ID of a volume in a body,
// where given, agree with the path, and fills them in from it.
func volumeAtPath(v *csi.Volume, ns, id string) error {
	if err := errors.Join(sameOrEmpty("namespace", v.Namespace, ns), sameOrEmpty("ID", v.ID, id)); err != nil {
		return err
	}
	v.Namespace, v.ID = ns, id
	return nil
}

// orEmpty makes a nil list encode as [] rather than null.
func orEmpty[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

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
func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) (*api.ClaimResponse, uint64, error) {
	ns, id, req, err := volumeRequest[api.ClaimRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	if err := errors.Join(csi.ValidateAllocationID(req.AllocationID), csi.ValidateNodeID(req.NodeID)); err != nil {
		return nil, 0, err
	}
	ctx := r.Context()
	vol, err := s.api.Volume(ctx, ns, id)
	if err != nil {
		return nil, 0, err
	}
	if req.AccessMode == csi.AccessModeUnknown && req.AttachmentMode == csi.AttachmentModeUnknown {
		if len(vol.Capabilities) != 1 {
			return nil, 0, fmt.Errorf("%w: volume %s/%s allows %d capabilities (%v): name the access and attachment modes of the claim",
				csi.ErrInvalidRequest, ns, id, len(vol.Capabilities), vol.Capabilities)
		}
		req.AccessMode, req.AttachmentMode = vol.Capabilities[0].AccessMode, vol.Capabilities[0].AttachmentMode
	}
	// The node must be known before anything is written: a claim on a
	// node that never registered would otherwise leave the allocation
	// placed there.
	if _, err := s.live.Address(req.NodeID); err != nil {
		return nil, 0, fmt.Errorf("%w: claim volume %s/%s for allocation %s: node %s has not registered with this server; start its agent or claim on another node",
			csi.ErrNodeNotFound, ns, id, req.AllocationID, req.NodeID)
	}
	if err := s.placeAllocation(ctx, req.AllocationID, ns, req.NodeID); err != nil {
		return nil, 0, err
	}
	resp, err := s.api.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: ns, VolumeID: id, Claim: csi.Claim{
		AllocationID: req.AllocationID, NodeID: req.NodeID, Mode: req.Mode,
		AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, MountOptions: req.MountOptions,
	}})
	if err != nil {
		return nil, 0, err
	}
	out := &api.ClaimResponse{
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
			return nil, 0, fmt.Errorf("volume %s is claimed by %s but node %s could not mount it (retry the claim, or release the allocation to undo it): %w",
				id, req.AllocationID, req.NodeID, err)
		}
		out.Mount = &api.MountInfo{NodeID: req.NodeID, Path: mr.Path, Usage: mr.Usage}
	}
	return out, out.Index, nil
}

// placeVolume answers which nodes can take a claim on the volume.
func (s *Server) placeVolume(w http.ResponseWriter, r *http.Request) (*api.PlaceResponse, uint64, error) {
	ns, id, req, err := volumeRequest[api.PlaceRequest](w, r)
	if err != nil {
		return nil, 0, err
	}
	for _, n := range req.Nodes {
		if err := csi.ValidateNodeID(n); err != nil {
			return nil, 0, err
		}
	}
	ctx := r.Context()
	idx, err := s.store().Index(state.TableVolumes)
	if err != nil {
		return nil, 0, err
	}
	vol, err := s.api.Volume(ctx, ns, id)
	if err != nil {
		return nil, 0, err
	}
	if req.AccessMode == csi.AccessModeUnknown && req.AttachmentMode == csi.AttachmentModeUnknown {
		if len(vol.Capabilities) != 1 {
			return nil, 0, fmt.Errorf("%w: volume %s/%s allows %d capabilities (%v): name the access and attachment modes of the claim",
				csi.ErrInvalidRequest, ns, id, len(vol.Capabilities), vol.Capabilities)
		}
		req.AccessMode, req.AttachmentMode = vol.Capabilities[0].AccessMode, vol.Capabilities[0].AttachmentMode
	}
	if req.Namespace == "" {
		req.Namespace = ns
	}
	resp, err := s.api.Feasibility(ctx, &rpcshim.FeasibilityRequest{
		Namespace: ns, VolumeID: id, Nodes: req.Nodes,
		Claim: csi.PlacementRequest{Namespace: req.Namespace, Mode: req.Mode,
			Capability: csi.Capability{AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode}},
	})
	if err != nil {
		return nil, 0, err
	}
	resp.Nodes = orEmpty(resp.Nodes)
	return resp, idx, nil
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
	return claims, idx, err
}

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
	return api.WriteResponse{}, 0, s.live.Heartbeat(r.PathValue("id"), s.now())
}

// leave takes a node agent's clean stop: the node is down at once.
func (s *Server) leave(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidateNodeID(id); err != nil {
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
	cmd := state.UpsertNodePlugins{NodeID: id}
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
		return api.WriteResponse{}, 0, err
	}
	s.printPluginChanges(id, before, req.Plugins)
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
