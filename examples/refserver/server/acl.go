package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// Policy is what one ACL token may do: its permissions in its
// namespaces ("*" for every namespace). csi.PermOperator grants every
// permission everywhere (a management token).
type Policy struct {
	// Name identifies the token in refusals and logs; it is not secret.
	Name        string
	Namespaces  []string
	Permissions []csi.Permission
}

// ACL is the server's access control: API requests carry a token
// (api.TokenHeader), bound to a Policy, and every csikit endpoint asks
// it through rpcshim's Authorizer. Tokens are kept by hash only. It is
// read-only after NewACL and safe for concurrent use.
type ACL struct {
	byHash map[string]*Policy
	byName map[string]*Policy
}

var _ rpcshim.Authorizer = (*ACL)(nil)

// NewACL builds an ACL from token secrets to policies. A secret shorter
// than 16 bytes or two policies with one name are refused.
func NewACL(tokens map[string]Policy) (*ACL, error) {
	a := &ACL{byHash: map[string]*Policy{}, byName: map[string]*Policy{}}
	for secret, p := range tokens {
		if len(secret) < 16 {
			return nil, fmt.Errorf("%w: ACL token of policy %q is shorter than 16 bytes; generate a random one", csi.ErrInvalidRequest, p.Name)
		}
		if p.Name == "" || a.byName[p.Name] != nil {
			return nil, fmt.Errorf("%w: ACL policy name %q is empty or used twice", csi.ErrInvalidRequest, p.Name)
		}
		pp := p
		a.byHash[state.HashNodeSecret(secret)] = &pp
		a.byName[p.Name] = &pp
	}
	return a, nil
}

// Authorize implements rpcshim.Authorizer: the principal's policy must
// grant perm in namespace.
func (a *ACL) Authorize(ctx context.Context, namespace string, perm csi.Permission) error {
	who, ok := csi.PrincipalFrom(ctx)
	if !ok {
		return fmt.Errorf("%w: no ACL token; send one (-token or $%s)", csi.ErrPermissionDenied, "CSIKIT_TOKEN")
	}
	p := a.byName[who.ID]
	if p == nil {
		return fmt.Errorf("%w: unknown ACL token", csi.ErrPermissionDenied)
	}
	if slices.Contains(p.Permissions, csi.PermOperator) {
		return nil
	}
	nsOK := slices.Contains(p.Namespaces, "*") || (namespace != csi.AllNamespaces && (namespace == "" || slices.Contains(p.Namespaces, namespace)))
	if !nsOK || !slices.Contains(p.Permissions, perm) {
		return fmt.Errorf("%w: token %q may not %s in namespace %q", csi.ErrPermissionDenied, p.Name, perm, namespace)
	}
	return nil
}

// withPrincipal puts the principal of the request's token, if it is a
// known one, in the request's ctx.
func (a *ACL) withPrincipal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.Header.Get(api.TokenHeader); t != "" {
			if p := a.byHash[state.HashNodeSecret(t)]; p != nil {
				r = r.WithContext(csi.WithPrincipal(r.Context(), csi.Principal{Kind: "token", ID: p.Name}))
			}
		}
		h.ServeHTTP(w, r)
	})
}

// authorize asks the ACL, if the server has one.
func (s *Server) authorize(ctx context.Context, namespace string, perm csi.Permission) error {
	if s.cfg.ACL == nil {
		return nil
	}
	return s.cfg.ACL.Authorize(ctx, namespace, perm)
}
