package rpcshim

import (
	"context"
	"errors"
	"fmt"

	"github.com/csikit/csikit/csi"
)

// Authorizer decides whether the caller of a Server endpoint may do what
// the endpoint does. The host implements it: it reads the principal its
// own transport authenticated (csi.PrincipalFrom(ctx), put there with
// csi.WithPrincipal) and checks it against its policies.
//
// Every Server endpoint calls Authorize exactly once, before it reads
// the store, takes a volume lock or calls a plugin, from the caller's
// goroutine; it may be called concurrently. The endpoints ask:
//
//	RegisterVolume, CreateVolume,
//	DeregisterVolume, DeleteVolume   csi.PermVolumeWrite  in the volume's namespace
//	Claim, Unpublish                 csi.PermVolumeClaim  in the volume's namespace
//	Volume, Feasibility              csi.PermVolumeRead   in the volume's namespace
//	Volumes                          csi.PermVolumeRead   in the namespace, csi.AllNamespaces for ""
//	Plugin, Plugins                  csi.PermPluginRead   namespace ""
//
// A nil error allows the call. An error refuses it: the endpoint
// returns it wrapped, matching csi.ErrPermissionDenied unless it matches
// csi.ErrUnavailable (the authorizer's own backend is down, Retryable).
// The error's text reaches the caller, so it must not hold a credential.
// Because the check comes first, a refused read says nothing about
// whether the volume exists.
//
// A Server without an Authorizer (ServerConfig.Authorizer nil) allows
// every call: for hosts that authorize upstream, before their API calls
// the Server.
type Authorizer interface {
	Authorize(ctx context.Context, namespace string, perm csi.Permission) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, namespace string, perm csi.Permission) error

var _ Authorizer = AuthorizerFunc(nil)

// Authorize implements Authorizer.
func (f AuthorizerFunc) Authorize(ctx context.Context, namespace string, perm csi.Permission) error {
	return f(ctx, namespace, perm)
}

// authorize asks the Server's Authorizer, if any, for perm in namespace
// on behalf of op.
func (s *Server) authorize(ctx context.Context, op, namespace string, perm csi.Permission) error {
	if s.auth == nil {
		return nil
	}
	err := s.auth.Authorize(ctx, namespace, perm)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, csi.ErrUnavailable), errors.Is(err, csi.ErrPermissionDenied):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %v", csi.ErrPermissionDenied, op, err)
}
