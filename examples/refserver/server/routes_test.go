package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
)

// routeAccess is what every route of the API must ask, written out
// here on its own so that a route added without a row, or a row whose
// route asks something else, fails TestServer_Routes_Access.
var routeAccess = map[string]server.Access{
	"GET /v1/volumes":                                        {Permission: csi.PermVolumeRead, Scope: server.ScopeQueryAll},
	"GET /v1/volumes/{namespace}/{id}":                       {Permission: csi.PermVolumeRead, Scope: server.ScopePath},
	"PUT /v1/volumes/{namespace}/{id}":                       {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/create":               {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"DELETE /v1/volumes/{namespace}/{id}":                    {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/claim":                {Permission: csi.PermVolumeClaim, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/place":                {Permission: csi.PermVolumeRead, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/expand":               {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/modify":               {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"POST /v1/volumes/{namespace}/{id}/snapshots/{snapshot}": {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"GET /v1/volumes/{namespace}/{id}/health":                {Permission: csi.PermVolumeRead, Scope: server.ScopePath},
	"GET /v1/snapshots":                                      {Permission: csi.PermVolumeRead, Scope: server.ScopeQueryAll},
	"GET /v1/snapshots/{namespace}/{snapshot}":               {Permission: csi.PermVolumeRead, Scope: server.ScopePath},
	"DELETE /v1/snapshots/{namespace}/{snapshot}":            {Permission: csi.PermVolumeWrite, Scope: server.ScopePath},
	"GET /v1/plugins":                                        {Permission: csi.PermPluginRead},
	"GET /v1/plugins/{id}":                                   {Permission: csi.PermPluginRead},
	"GET /v1/plugins/{id}/rpc":                               {Permission: csi.PermPluginRead},
	"POST /v1/allocations/{id}/release":                      {Permission: csi.PermVolumeClaim, Scope: server.ScopeQueryDefault},
	"GET /v1/allocations/{id}/claims":                        {Permission: csi.PermVolumeRead, Scope: server.ScopeQueryDefault},
	"GET /v1/health":                                         {Permission: csi.PermVolumeRead, Scope: server.ScopeAll},
	"GET /v1/nodes":                                          {Permission: csi.PermPluginRead},
	"DELETE /v1/nodes/{id}":                                  {Permission: csi.PermOperator},
	"PUT /v1/nodes/{id}":                                     {NodeSecret: true},
	"PUT /v1/nodes/{id}/heartbeat":                           {NodeSecret: true},
	"DELETE /v1/nodes/{id}/heartbeat":                        {NodeSecret: true},
	"PUT /v1/nodes/{id}/plugins":                             {NodeSecret: true},
	"POST /v1/acl/bootstrap":                                 {Public: true},
	"GET /v1/acl/tokens":                                     {Permission: csi.PermOperator},
	"PUT /v1/acl/tokens/{name}":                              {Permission: csi.PermOperator},
	"DELETE /v1/acl/tokens/{name}":                           {Permission: csi.PermOperator},
	"GET /v1/metrics":                                        {Public: true},
	api.InternalPrefix:                                       {Internal: true},
	"/":                                                      {Public: true},
}

// permTokens returns an ACL with, for each permission, a token that
// holds only it ("only-P") and one that holds every other but
// operator ("but-P"), all in every namespace.
func permTokens(t *testing.T) (*server.ACL, map[string]string) {
	t.Helper()
	policies, tokens := map[string]server.Policy{}, map[string]string{}
	for _, p := range csi.Permissions() {
		var others []csi.Permission
		for _, o := range csi.Permissions() {
			if o != p && o != csi.PermOperator {
				others = append(others, o)
			}
		}
		for name, perms := range map[string][]csi.Permission{"only-" + string(p): {p}, "but-" + string(p): others} {
			secret := name + "-token-0123456789abcdef"
			policies[secret] = server.Policy{Name: name, Namespaces: []string{"*"}, Permissions: perms}
			tokens[name] = secret
		}
	}
	acl, err := server.NewACL(policies)
	must(t, err)
	return acl, tokens
}

// TestServer_Routes_Access walks every pattern the server's mux
// registered: each must have a row in routeAccess, say the same
// access, and behave as it says. A permission route refuses (403) a
// request without a token and one with every other permission, and
// lets one with only that permission through (any answer but 403); a
// node route refuses a call for a registered node without its secret
// and takes one with it; a public route answers without a token. The
// internal endpoints' cluster token is checked by package cluster's
// TestServer_Internal ("apply from a non-server is refused").
func TestServer_Routes_Access(t *testing.T) {
	acl, tokens := permTokens(t)
	ts := startServer(t, server.Config{ACL: acl, Internal: http.NotFoundHandler()})
	const nodeSecret = "0123456789abcdef0123456789abcdef-node-n1"

	var patterns []string
	for _, r := range ts.srv.Routes() {
		patterns = append(patterns, r.Pattern)
		want, ok := routeAccess[r.Pattern]
		if !ok {
			t.Errorf("route %q (%s) has no row in routeAccess: add one with the permission it asks", r.Pattern, r.Access)
			continue
		}
		if want != r.Access {
			t.Errorf("route %q asks %s, the table says %s", r.Pattern, r.Access, want)
		}
		t.Run(r.Pattern, func(t *testing.T) { checkRoute(t, ts, r.Pattern, want, tokens, nodeSecret) })
	}
	for p := range routeAccess {
		if !slices.Contains(patterns, p) {
			t.Errorf("routeAccess row %q names no registered route", p)
		}
	}
}

func checkRoute(t *testing.T, ts *testServer, pattern string, a server.Access, tokens map[string]string, nodeSecret string) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = http.MethodGet, pattern
	}
	path = strings.NewReplacer("{namespace}", "team-a", "{id}", "n1", "{snapshot}", "s1", "{name}", "t1").Replace(path)
	if strings.HasSuffix(path, "/") {
		path += "nope"
	}
	status := func(header, value string) int {
		t.Helper()
		req, err := http.NewRequest(method, ts.url+path, strings.NewReader("{}"))
		must(t, err)
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	switch {
	case a.Internal:
		return
	case a.Public:
		if got := status("", ""); got == http.StatusForbidden {
			t.Errorf("%s %s without a token: 403, want an answer", method, path)
		}
	case a.NodeSecret:
		// DELETE /v1/nodes/{id} may have run: register again.
		must(t, ts.client.WithNodeSecret(nodeSecret).RegisterNode(context.Background(), "n1", &api.RegisterNodeRequest{Address: "127.0.0.1:1"}))
		if got := status("", ""); got != http.StatusForbidden {
			t.Errorf("%s %s without the node's secret: %d, want 403", method, path, got)
		}
		if got := status(api.NodeSecretHeader, nodeSecret); got == http.StatusForbidden {
			t.Errorf("%s %s with the node's secret: 403", method, path)
		}
	default:
		p := string(a.Permission)
		for _, c := range []struct {
			name, token string
			allowed     bool
		}{{"no token", "", false}, {"every other permission", tokens["but-"+p], false}, {"only " + p, tokens["only-"+p], true}} {
			got := status(api.TokenHeader, c.token)
			if (got == http.StatusForbidden) == c.allowed {
				t.Errorf("%s %s with %s: status %d, allowed %t", method, path, c.name, got, c.allowed)
			}
		}
	}
}
