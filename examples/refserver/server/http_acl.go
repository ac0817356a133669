package server

import (
	"crypto/rand"
	"fmt"
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

// stateACL refuses the ACL token endpoints (csi.ErrInvalidRequest)
// unless the server's tokens live in its state (NewStateACL).
func (s *Server) stateACL(r *http.Request) error {
	if s.cfg.ACL == nil || !s.cfg.ACL.replicated() {
		return fmt.Errorf("%w: %s %s: this server keeps no ACL tokens in its state (start it with -acl)", csi.ErrInvalidRequest, r.Method, r.URL.Path)
	}
	return nil
}

// putToken draws a new secret for tok, writes tok with its hash, and
// returns it with the secret, which is kept nowhere.
func (s *Server) putToken(r *http.Request, tok state.ACLToken, bootstrap bool) (*api.ACLToken, uint64, error) {
	secret := rand.Text() + rand.Text()
	tok.Hash = state.HashNodeSecret(secret)
	res, err := s.applier().Apply(r.Context(), state.UpsertACLToken{Token: tok, Bootstrap: bootstrap})
	if err != nil {
		return nil, 0, err
	}
	return &api.ACLToken{Name: tok.Name, Token: secret, Namespaces: tok.Namespaces, Permissions: tok.Permissions, Index: res.Index}, res.Index, nil
}

// bootstrapACL answers POST /v1/acl/bootstrap: the first management
// token, once per cluster (state.ErrACLBootstrapped after).
func (s *Server) bootstrapACL(_ http.ResponseWriter, r *http.Request) (*api.ACLToken, uint64, error) {
	if err := s.stateACL(r); err != nil {
		return nil, 0, err
	}
	out, idx, err := s.putToken(r, state.ACLToken{Name: "management", Permissions: []csi.Permission{csi.PermOperator}}, true)
	if err != nil {
		return nil, 0, err
	}
	s.cfg.Events.Printf("server", "ACL bootstrapped: management token made (its secret went to the caller only)")
	return out, idx, nil
}

// putACLToken answers PUT /v1/acl/tokens/{name}, an operator's call.
func (s *Server) putACLToken(w http.ResponseWriter, r *http.Request) (*api.ACLToken, uint64, error) {
	if err := s.stateACL(r); err != nil {
		return nil, 0, err
	}
	var req api.ACLTokenRequest
	if err := decode(r, w, &req); err != nil {
		return nil, 0, err
	}
	return s.putToken(r, state.ACLToken{Name: r.PathValue("name"), Namespaces: req.Namespaces, Permissions: req.Permissions}, false)
}

// listACLTokens answers GET /v1/acl/tokens: names and policies only.
func (s *Server) listACLTokens(_ http.ResponseWriter, r *http.Request) ([]api.ACLToken, uint64, error) {
	if err := s.stateACL(r); err != nil {
		return nil, 0, err
	}
	toks, err := s.cfg.ACL.tokens.ACLTokens()
	if err != nil {
		return nil, 0, err
	}
	out := []api.ACLToken{}
	for _, t := range toks {
		out = append(out, api.ACLToken{Name: t.Name, Namespaces: t.Namespaces, Permissions: t.Permissions})
	}
	return out, 0, nil
}

// deleteACLToken answers DELETE /v1/acl/tokens/{name}.
func (s *Server) deleteACLToken(_ http.ResponseWriter, r *http.Request) (api.WriteResponse, uint64, error) {
	if err := s.stateACL(r); err != nil {
		return api.WriteResponse{}, 0, err
	}
	res, err := s.applier().Apply(r.Context(), state.DeleteACLToken{Name: r.PathValue("name")})
	if err != nil {
		return api.WriteResponse{}, 0, err
	}
	return api.WriteResponse{Index: res.Index}, res.Index, nil
}
