package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// An Authorizer over a policy table: each principal is granted
// permissions in namespaces. The host's API layer puts the
// authenticated principal in ctx before it calls the Server; the Server
// asks before every endpoint runs (ServerConfig.Authorizer).
func ExampleAuthorizerFunc() {
	type grant struct {
		namespace string
		perms     []csi.Permission
	}
	policies := map[csi.Principal][]grant{
		{Kind: "token", ID: "ci"}: {{"default", []csi.Permission{csi.PermVolumeRead, csi.PermVolumeClaim}}},
	}
	auth := rpcshim.AuthorizerFunc(func(ctx context.Context, namespace string, perm csi.Permission) error {
		p, ok := csi.PrincipalFrom(ctx)
		if !ok {
			return fmt.Errorf("%w: no credentials", csi.ErrPermissionDenied)
		}
		for _, g := range policies[p] {
			if g.namespace == namespace && slices.Contains(g.perms, perm) {
				return nil
			}
		}
		return fmt.Errorf("%w: %s may not %s in namespace %q", csi.ErrPermissionDenied, p, perm, namespace)
	})
	_ = rpcshim.ServerConfig{Authorizer: auth} // with Store, Applier, Router

	ci := csi.WithPrincipal(context.Background(), csi.Principal{Kind: "token", ID: "ci"})
	fmt.Println(auth.Authorize(ci, "default", csi.PermVolumeClaim))
	err := auth.Authorize(ci, "prod", csi.PermVolumeClaim)
	fmt.Println(errors.Is(err, csi.ErrPermissionDenied), err)
	// Output:
	// <nil>
	// true permission denied: token:ci may not volume-claim in namespace "prod"
}
