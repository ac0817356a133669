package csi

import (
	"context"
	"fmt"
)

// Permission names what an operation is allowed to do. A host's
// authorizer grants permissions per namespace to a principal; csikit's
// server endpoints ask for exactly one permission each (see
// rpcshim.Authorizer for which endpoint asks which).
type Permission string

// The permissions. Their string forms are stable: hosts write them in
// policy files.
const (
	// PermVolumeRead lists and reads volumes (secrets are never
	// returned, whatever the permission) and asks placement questions.
	PermVolumeRead Permission = "volume-read"
	// PermVolumeWrite registers, creates, deregisters and deletes
	// volumes.
	PermVolumeWrite Permission = "volume-write"
	// PermVolumeClaim claims volumes for allocations and reports their
	// unmount.
	PermVolumeClaim Permission = "volume-claim"
	// PermPluginRead reads plugins and their instances. Plugins are not
	// namespaced: it is asked with namespace "".
	PermPluginRead Permission = "plugin-read"
	// PermNodeRegister registers nodes and reports their plugins: what a
	// node agent holds.
	PermNodeRegister Permission = "node-register"
	// PermOperator is cluster administration (tokens, forced cleanup).
	// A host may treat it as implying every other permission.
	PermOperator Permission = "operator"
)

// AllNamespaces is the namespace an authorizer is asked about when an
// operation spans every namespace (a volume list without a namespace).
const AllNamespaces = "*"

// Permissions lists every permission, in the order above.
func Permissions() []Permission {
	return []Permission{PermVolumeRead, PermVolumeWrite, PermVolumeClaim, PermPluginRead, PermNodeRegister, PermOperator}
}

// ParsePermission returns the permission named s, or an error matching
// ErrInvalidRequest.
func ParsePermission(s string) (Permission, error) {
	for _, p := range Permissions() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: unknown permission %q; use one of %v", ErrInvalidRequest, s, Permissions())
}

// Principal is who makes a call, as the host authenticated it: an ACL
// token's accessor, a node, another server. csikit never reads it; it
// carries it in the ctx from the host's transport to the host's
// authorizer.
type Principal struct {
	// Kind says what authenticated the caller, for example "token",
	// "node" or "server".
	Kind string
	// ID names the caller within its kind (a token accessor, a node
	// ID). It must not be a secret: it may be logged.
	ID string
}

func (p Principal) String() string { return p.Kind + ":" + p.ID }

type principalKey struct{}

// WithPrincipal returns a ctx that carries p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries, and whether it
// carries one.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
