package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/state"
)

// nodeSecretHash is the hash of the node secret r carries, "" for none.
func nodeSecretHash(r *http.Request) string {
	if s := r.Header.Get(api.NodeSecretHeader); s != "" {
		return state.HashNodeSecret(s)
	}
	return ""
}

// registerIdentity records the node's identity (state.RegisterNode) when
// the agent sent a secret, and refuses one without a secret for a node
// registered with one. A refusal is printed with the caller's address,
// never the secret.
func (s *Server) registerIdentity(ctx context.Context, r *http.Request, id, addr string) error {
	hash := nodeSecretHash(r)
	var err error
	if hash == "" {
		err = s.checkNodeSecret(id, hash)
	} else {
		_, err = s.applier().Apply(ctx, state.RegisterNode{NodeID: id, SecretHash: hash, Address: addr})
	}
	s.refused(r, id, err)
	return err
}

// checkNodeSecret refuses a node call without the secret of a node
// registered with one.
func (s *Server) checkNodeSecret(id, hash string) error {
	n, err := s.store().Node(id)
	if errors.Is(err, csi.ErrNodeNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return n.CheckSecretHash(hash)
}

// refused prints a line for a node call refused for its identity.
func (s *Server) refused(r *http.Request, id string, err error) {
	if errors.Is(err, csi.ErrPermissionDenied) {
		s.cfg.Events.Printf("server", "refused %s %s for node %s from %s: not the node's secret", r.Method, r.URL.Path, id, r.RemoteAddr)
	}
}
