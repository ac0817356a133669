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
// it through rpcshim's Authorizer. Tokens are kept by hash only: in a
// fixed table (NewACL, LoadACL), or in the replicated state
// (NewStateACL), where a token made through one server works on every
// server of the cluster. It is safe for concurrent use.
type ACL struct {
	byHash map[string]*Policy
	// tokens, if set, is where tokens are found instead: the state's
	// ACL table (state.UpsertACLToken).
	tokens state.ACLReader
}

var _ rpcshim.Authorizer = (*ACL)(nil)

// principalServer is the Kind of the server's own principal, for the
// csikit endpoints it calls on its own behalf, with no token behind
// them: resuming the volume changes of an earlier term, and the node
// expansions a node owes after its report or a mount. Only asServer
// makes it; a request's principal is of Kind "token" (withPrincipal),
// whatever its token's name.
const principalServer = "server"

// asServer returns ctx with the server's own principal.
func asServer(ctx context.Context) context.Context {
	return csi.WithPrincipal(ctx, csi.Principal{Kind: principalServer, ID: "refserver"})
}

// policyKey carries the policy of the request's token in its ctx.
type policyKey struct{}

// NewStateACL returns an ACL whose tokens are those of the replicated
// state (state.UpsertACLToken), read through r: none until the first
// is bootstrapped (POST /v1/acl/bootstrap).
func NewStateACL(r state.ACLReader) *ACL { return &ACL{tokens: r} }

// replicated reports whether the ACL's tokens live in the state.
func (a *ACL) replicated() bool { return a.tokens != nil }

// byTokenHash returns the policy of the token with hash h, or nil.
func (a *ACL) byTokenHash(h string) *Policy {
	if a.tokens == nil {
		return a.byHash[h]
	}
	t, err := a.tokens.ACLTokenByHash(h)
	if err != nil {
		return nil
	}
	return &Policy{Name: t.Name, Namespaces: t.Namespaces, Permissions: t.Permissions}
}

// NewACL builds an ACL from token secrets to policies. A secret shorter
// than 16 bytes or two policies with one name are refused.
func NewACL(tokens map[string]Policy) (*ACL, error) {
	a := &ACL{byHash: map[string]*Policy{}}
	names := map[string]bool{}
	for secret, p := range tokens {
		if len(secret) < 16 {
			return nil, fmt.Errorf("%w: ACL token of policy %q is shorter than 16 bytes; generate a random one", csi.ErrInvalidRequest, p.Name)
		}
		if p.Name == "" || names[p.Name] {
			return nil, fmt.Errorf("%w: ACL policy name %q is empty or used twice", csi.ErrInvalidRequest, p.Name)
		}
		pp := p
		a.byHash[state.HashNodeSecret(secret)], names[p.Name] = &pp, true
	}
	return a, nil
}

// Authorize implements rpcshim.Authorizer: the principal's policy must
// grant perm in namespace.
func (a *ACL) Authorize(ctx context.Context, namespace string, perm csi.Permission) error {
	who, ok := csi.PrincipalFrom(ctx)
	if !ok {
		return fmt.Errorf("%w: no ACL token; send one (-token or $%s)", csi.ErrPermissionDenied, api.TokenEnv)
	}
	if who.Kind == principalServer {
		return nil
	}
	// withPrincipal put the token's policy beside its principal.
	p, _ := ctx.Value(policyKey{}).(*Policy)
	if p == nil || p.Name != who.ID {
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
			if p := a.byTokenHash(state.HashNodeSecret(t)); p != nil {
				ctx := context.WithValue(r.Context(), policyKey{}, p)
				r = r.WithContext(csi.WithPrincipal(ctx, csi.Principal{Kind: "token", ID: p.Name}))
			}
		}
		h.ServeHTTP(w, r)
	})
}
