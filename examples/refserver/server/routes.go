package server

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
)

// Scope says where a route's permission is asked.
type Scope int

// The scopes of a route's Access.
const (
	// ScopeCluster asks the permission with namespace "": plugins,
	// nodes, operator calls.
	ScopeCluster Scope = iota
	// ScopePath asks it in the path's {namespace}.
	ScopePath
	// ScopeQueryAll asks it in ?namespace=, or in csi.AllNamespaces
	// when the query names none (a list of every namespace).
	ScopeQueryAll
	// ScopeQueryDefault asks it in ?namespace=, or in
	// api.DefaultNamespace (an allocation, found only in its namespace).
	ScopeQueryDefault
	// ScopeAll asks it in csi.AllNamespaces.
	ScopeAll
)

// Access is what a route asks of its caller. With Config.ACL nil every
// route but the node ones is open.
type Access struct {
	// Permission is what the caller's ACL token must grant, in Scope;
	// "" when the route asks no token (Public, NodeSecret).
	Permission csi.Permission
	Scope      Scope
	// NodeSecret marks a node's own call (register, heartbeat, leave,
	// plugin report): the agent proves it is the node with the node's
	// secret (api.NodeSecretHeader), not with an ACL token.
	NodeSecret bool
	// Internal marks the cluster's server-to-server endpoints, whose
	// own handler (package cluster) asks forwarded writes for the
	// cluster token.
	Internal bool
	// Public marks a route that answers anyone: the metrics (bounded
	// labels, no secret, scraped by tools that send no ACL token) and
	// the unknown-endpoint answer.
	Public bool
}

// Route is one registered pattern (as http.ServeMux takes it) and
// what it asks.
type Route struct {
	Pattern string
	Access  Access
}

// mux is the API's http.ServeMux with the pattern and access of every
// route it was given, so that the access table can be walked (Routes)
// and no route is registered without saying what it asks.
type mux struct {
	s      *Server
	m      *http.ServeMux
	routes []Route
}

// handle registers h at pattern behind the check of a.
func (x *mux) handle(pattern string, a Access, h http.Handler) {
	x.routes = append(x.routes, Route{Pattern: pattern, Access: a})
	x.m.Handle(pattern, x.s.guard(a, h))
}

// Routes returns every route the API serves, in the order registered.
// The cluster's internal endpoints, under api.InternalPrefix, are one
// route whose own handler checks the cluster token. The caller owns
// the slice.
func (s *Server) Routes() []Route { return slices.Clone(s.routeTable) }

// guard asks the ACL for a's permission before h runs, so that a
// refused caller learns nothing from h (not whether an object exists,
// not whether its body was valid). rpcshim asks again inside, in the
// object's own namespace.
func (s *Server) guard(a Access, h http.Handler) http.Handler {
	if a.Permission == "" || s.cfg.ACL == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns, err := a.namespace(r)
		if err == nil {
			err = s.cfg.ACL.Authorize(r.Context(), ns, a.Permission)
		}
		if err != nil {
			writeError(w, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// namespace is the namespace a's permission is asked in for r.
func (a Access) namespace(r *http.Request) (string, error) {
	var ns string
	switch a.Scope {
	case ScopeCluster:
		return "", nil
	case ScopeAll:
		return csi.AllNamespaces, nil
	case ScopePath:
		ns = r.PathValue("namespace")
	case ScopeQueryAll:
		ns = cmp.Or(r.URL.Query().Get("namespace"), csi.AllNamespaces)
		if ns == csi.AllNamespaces {
			return ns, nil
		}
	case ScopeQueryDefault:
		ns = cmp.Or(r.URL.Query().Get("namespace"), api.DefaultNamespace)
	}
	if err := csi.ValidateNamespace(ns); err != nil {
		return "", err
	}
	return ns, nil
}

// String names the access for tables and errors.
func (a Access) String() string {
	switch {
	case a.Public:
		return "public"
	case a.NodeSecret:
		return "node secret"
	case a.Internal:
		return "cluster token"
	}
	scope := map[Scope]string{ScopeCluster: "cluster", ScopePath: "path namespace", ScopeQueryAll: "query namespace or all",
		ScopeQueryDefault: "query namespace or default", ScopeAll: "all namespaces"}[a.Scope]
	return strings.Join([]string{string(a.Permission), scope}, " in ")
}
