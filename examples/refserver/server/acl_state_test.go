package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/state"
)

// startStateACLServer starts a server whose ACL tokens are in its
// state (server.NewStateACL).
func startStateACLServer(t *testing.T) *testServer {
	t.Helper()
	st, err := state.NewMemStore(state.Config{})
	must(t, err)
	return startServer(t, server.Config{Store: st, Applier: state.NewLocalApplier(st), ACL: server.NewStateACL(st)})
}

// TestServer_StateACL bootstraps ACLs once, makes, lists and revokes a
// namespace token, and shows no secret in any listing.
func TestServer_StateACL(t *testing.T) {
	ts := startStateACLServer(t)
	ctx := context.Background()
	if _, _, err := ts.client.Volumes(ctx, "default", "", nil); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a read before the bootstrap: %v, want csi.ErrPermissionDenied", err)
	}
	boot, err := ts.client.BootstrapACL(ctx)
	must(t, err)
	if len(boot.Token) < 32 || boot.Name != "management" {
		t.Fatalf("bootstrap: %+v", boot)
	}
	if strings.Contains(ts.out.String(), boot.Token) {
		t.Errorf("the server printed the management token")
	}
	if _, err := ts.client.BootstrapACL(ctx); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a second bootstrap: %v, want csi.ErrPermissionDenied", err)
	}
	mgmt := ts.client.WithToken(boot.Token)
	req := &api.ACLTokenRequest{Namespaces: []string{"team-a"}, Permissions: []csi.Permission{csi.PermVolumeRead}}
	if _, err := ts.client.CreateACLToken(ctx, "team-a", req); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a token made without a token: %v, want csi.ErrPermissionDenied", err)
	}
	team, err := mgmt.CreateACLToken(ctx, "team-a", req)
	must(t, err)
	if _, err := ts.client.WithToken(team.Token).CreateACLToken(ctx, "team-b", req); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a token made by a namespace token: %v, want csi.ErrPermissionDenied", err)
	}
	if _, _, err := ts.client.WithToken(team.Token).Volumes(ctx, "team-a", "", nil); err != nil {
		t.Fatalf("the team token in its namespace: %v", err)
	}
	bad := &api.ACLTokenRequest{Permissions: []csi.Permission{"root"}}
	if _, err := mgmt.CreateACLToken(ctx, "bad", bad); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("a token with an unknown permission: %v, want csi.ErrInvalidRequest", err)
	}
	toks, err := mgmt.ACLTokens(ctx)
	must(t, err)
	if len(toks) != 2 || toks[0].Name != "management" || toks[1].Name != "team-a" || toks[0].Token != "" || toks[1].Token != "" {
		t.Fatalf("tokens: %+v; want management and team-a without secrets", toks)
	}
	_, err = mgmt.DeleteACLToken(ctx, "team-a")
	must(t, err)
	if _, _, err := ts.client.WithToken(team.Token).Volumes(ctx, "team-a", "", nil); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a revoked token: %v, want csi.ErrPermissionDenied", err)
	}
}

// TestServer_StateACL_NotReplicated refuses the ACL token endpoints of
// a server whose tokens are not in its state: one without ACLs, and one
// with a fixed token table (server.NewACL).
func TestServer_StateACL_NotReplicated(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]server.Config{"no ACL": {}, "token file": {ACL: testACL(t)}} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, cfg)
			if _, err := ts.client.BootstrapACL(ctx); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("bootstrap: %v, want csi.ErrInvalidRequest", err)
			}
			if _, err := ts.client.WithToken(mgmtToken).CreateACLToken(ctx, "x", &api.ACLTokenRequest{}); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("create: %v, want csi.ErrInvalidRequest", err)
			}
		})
	}
}

// TestServer_StateACL_TokenNamedServer makes a token named like the
// server's own principal: it gets only its own policy.
func TestServer_StateACL_TokenNamedServer(t *testing.T) {
	ts := startStateACLServer(t)
	ctx := context.Background()
	boot, err := ts.client.BootstrapACL(ctx)
	must(t, err)
	for _, name := range []string{"server", "refserver"} {
		tok, err := ts.client.WithToken(boot.Token).CreateACLToken(ctx, name, &api.ACLTokenRequest{})
		must(t, err)
		if _, _, err := ts.client.WithToken(tok.Token).Volumes(ctx, "default", "", nil); !errors.Is(err, csi.ErrPermissionDenied) {
			t.Errorf("a token named %s without permissions: %v, want csi.ErrPermissionDenied", name, err)
		}
	}
}
