package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// routes builds the API's mux. Every route says what it asks of its
// caller (routes.go); TestServer_Routes_Access walks them all.
func (s *Server) routes() http.Handler {
	m := &mux{s: s, m: http.NewServeMux()}
	read, write, claim := csi.PermVolumeRead, csi.PermVolumeWrite, csi.PermVolumeClaim
	in := func(p csi.Permission, sc Scope) Access { return Access{Permission: p, Scope: sc} }
	node := Access{NodeSecret: true}
	m.handle("GET /v1/volumes", in(read, ScopeQueryAll), handle(s.listVolumes))
	m.handle("GET /v1/volumes/{namespace}/{id}", in(read, ScopePath), handle(s.getVolume))
	m.handle("PUT /v1/volumes/{namespace}/{id}", in(write, ScopePath), handle(s.registerVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/create", in(write, ScopePath), handle(s.createVolume))
	m.handle("DELETE /v1/volumes/{namespace}/{id}", in(write, ScopePath), handle(s.deleteVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/claim", in(claim, ScopePath), handle(s.claimVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/place", in(read, ScopePath), handle(s.placeVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/expand", in(write, ScopePath), handle(s.expandVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/modify", in(write, ScopePath), handle(s.modifyVolume))
	m.handle("POST /v1/volumes/{namespace}/{id}/snapshots/{snapshot}", in(write, ScopePath), handle(s.createSnapshot))
	m.handle("GET /v1/volumes/{namespace}/{id}/health", in(read, ScopePath), handle(s.getHealth))
	m.handle("GET /v1/snapshots", in(read, ScopeQueryAll), handle(s.listSnapshots))
	m.handle("GET /v1/snapshots/{namespace}/{snapshot}", in(read, ScopePath), handle(s.getSnapshot))
	m.handle("DELETE /v1/snapshots/{namespace}/{snapshot}", in(write, ScopePath), handle(s.deleteSnapshot))
	m.handle("GET /v1/plugins", in(csi.PermPluginRead, ScopeCluster), handle(s.listPlugins))
	m.handle("GET /v1/plugins/{id}", in(csi.PermPluginRead, ScopeCluster), handle(s.getPlugin))
	m.handle("GET /v1/plugins/{id}/rpc", in(csi.PermPluginRead, ScopeCluster), handle(s.getPluginRPC))
	m.handle("POST /v1/allocations/{id}/release", in(claim, ScopeQueryDefault), handle(s.release))
	m.handle("GET /v1/allocations/{id}/claims", in(read, ScopeQueryDefault), handle(s.allocationClaims))
	m.handle("GET /v1/health", in(read, ScopeAll), handle(s.listHealth))
	m.handle("GET /v1/nodes", in(csi.PermPluginRead, ScopeCluster), handle(s.listNodes))
	m.handle("DELETE /v1/nodes/{id}", in(csi.PermOperator, ScopeCluster), handle(s.deleteNode))
	m.handle("PUT /v1/nodes/{id}", node, handle(s.registerNode))
	m.handle("PUT /v1/nodes/{id}/heartbeat", node, handle(s.heartbeat))
	m.handle("DELETE /v1/nodes/{id}/heartbeat", node, handle(s.leave))
	m.handle("PUT /v1/nodes/{id}/plugins", node, handle(s.reportPlugins))
	// Refused once any token exists: the first caller gets the
	// management token, as with Nomad's acl bootstrap.
	m.handle("POST /v1/acl/bootstrap", Access{Public: true}, handle(s.bootstrapACL))
	m.handle("GET /v1/acl/tokens", in(csi.PermOperator, ScopeCluster), handle(s.listACLTokens))
	m.handle("PUT /v1/acl/tokens/{name}", in(csi.PermOperator, ScopeCluster), handle(s.putACLToken))
	m.handle("DELETE /v1/acl/tokens/{name}", in(csi.PermOperator, ScopeCluster), handle(s.deleteACLToken))
	m.handle("GET /v1/metrics", Access{Public: true}, s.cfg.Metrics.Handler())
	if s.cfg.Internal != nil {
		m.handle(api.InternalPrefix, Access{Internal: true}, s.cfg.Internal)
	}
	m.handle("/", Access{Public: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("%w: no endpoint %s %s; see the api package doc for the endpoints", csi.ErrInvalidRequest, r.Method, r.URL.Path))
	}))
	s.routeTable = m.routes
	return m.m
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
