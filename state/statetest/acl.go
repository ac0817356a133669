package statetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// aclReader returns the store as a state.ACLReader, or skips: a store
// that keeps no ACL tokens need not have the commands.
func aclReader(t *testing.T, w *world) state.ACLReader {
	t.Helper()
	ar, ok := w.s.(state.ACLReader)
	if !ok {
		t.Skip("the store is not a state.ACLReader")
	}
	return ar
}

// aclTokens checks UpsertACLToken and DeleteACLToken: one bootstrap per
// store, tokens found by hash only, a hash never shared, bad tokens
// refused with nothing written, revocation, and the tokens carried
// through a snapshot.
func (s suite) aclTokens(t *testing.T) {
	t.Run("BootstrapOnce", s.aclBootstrapOnce)
	t.Run("UpsertAndDelete", s.aclUpsertAndDelete)
	t.Run("Invalid", s.aclInvalid)
	t.Run("Snapshot", s.aclSnapshot)
}

// aclTestTokens are a management token and a namespace token.
func aclTestTokens() (mgmt, team state.ACLToken) {
	mgmt = state.ACLToken{Name: "management", Hash: state.HashNodeSecret("mgmt-secret"), Permissions: []csi.Permission{csi.PermOperator}}
	team = state.ACLToken{Name: "team-a", Hash: state.HashNodeSecret("team-secret"), Namespaces: []string{nsDefault},
		Permissions: []csi.Permission{csi.PermVolumeRead, csi.PermVolumeWrite}}
	return mgmt, team
}

// aclBootstrapOnce bootstraps once: a second bootstrap is refused with nothing written.
func (s suite) aclBootstrapOnce(t *testing.T) {
	mgmt, team := aclTestTokens()
	w := s.empty(t)
	ar := aclReader(t, w)
	before := w.index(t, state.TableNodes)
	res := w.must(t, state.UpsertACLToken{Token: mgmt, Bootstrap: true})
	if !res.Changed || w.index(t, state.TableNodes) != res.Index || res.Index <= before {
		t.Errorf("bootstrap: %+v, nodes table index %d; want it changed at its index", res, w.index(t, state.TableNodes))
	}
	w.refuse(t, state.UpsertACLToken{Token: team, Bootstrap: true}, state.ErrACLBootstrapped)
	got, err := ar.ACLTokenByHash(mgmt.Hash)
	if err != nil || got.Name != mgmt.Name || got.CreateIndex != res.Index || got.ModifyIndex != res.Index {
		t.Fatalf("ACLTokenByHash(management) = %+v, %v", got, err)
	}
	got.Permissions[0] = csi.PermVolumeRead // the caller owns it
	if again, _ := ar.ACLTokenByHash(mgmt.Hash); again.Permissions[0] != csi.PermOperator {
		t.Errorf("a change to a returned token reached the store: %+v", again)
	}
}

// aclUpsertAndDelete rotates a token's secret, lists the tokens and revokes one.
func (s suite) aclUpsertAndDelete(t *testing.T) {
	mgmt, team := aclTestTokens()
	w := s.empty(t)
	ar := aclReader(t, w)
	w.must(t, state.UpsertACLToken{Token: mgmt, Bootstrap: true})
	created := w.must(t, state.UpsertACLToken{Token: team})
	rotated := team
	rotated.Hash = state.HashNodeSecret("team-secret-2")
	w.must(t, state.UpsertACLToken{Token: rotated})
	if _, err := ar.ACLTokenByHash(team.Hash); !errors.Is(err, state.ErrACLTokenNotFound) {
		t.Errorf("the replaced secret's hash: %v, want ErrACLTokenNotFound", err)
	}
	got, err := ar.ACLTokenByHash(rotated.Hash)
	if err != nil || got.CreateIndex != created.Index || got.ModifyIndex != w.idx {
		t.Fatalf("the rotated token: %+v, %v; want created at %d, modified at %d", got, err, created.Index, w.idx)
	}
	list, err := ar.ACLTokens()
	if err != nil || len(list) != 2 || list[0].Name != "management" || list[1].Name != "team-a" {
		t.Fatalf("ACLTokens = %+v, %v; want management and team-a, by name", list, err)
	}
	w.must(t, state.DeleteACLToken{Name: "team-a"})
	if _, err := ar.ACLTokenByHash(rotated.Hash); !errors.Is(err, state.ErrACLTokenNotFound) || !errors.Is(err, csi.ErrPermissionDenied) {
		t.Errorf("a deleted token: %v, want ErrACLTokenNotFound", err)
	}
	w.noop(t, state.DeleteACLToken{Name: "team-a"})
}

// aclInvalid refuses a shared hash, a secret in clear, an unknown permission
// and bad names, with nothing written.
func (s suite) aclInvalid(t *testing.T) {
	mgmt, team := aclTestTokens()
	w := s.empty(t)
	aclReader(t, w)
	w.must(t, state.UpsertACLToken{Token: mgmt, Bootstrap: true})
	thief := team
	thief.Hash = mgmt.Hash
	w.refuse(t, state.UpsertACLToken{Token: thief}, csi.ErrInvalidRequest, "team-a", "hash")
	clear := team
	clear.Hash = "team-secret"
	w.refuse(t, state.UpsertACLToken{Token: clear}, csi.ErrInvalidRequest, "HashNodeSecret")
	root := team
	root.Permissions = []csi.Permission{"root"}
	w.refuse(t, state.UpsertACLToken{Token: root}, csi.ErrInvalidRequest)
	badNS := team
	badNS.Namespaces = []string{"../x"}
	w.refuse(t, state.UpsertACLToken{Token: badNS}, csi.ErrInvalidID)
	unnamed := team
	unnamed.Name = ""
	w.refuse(t, state.UpsertACLToken{Token: unnamed}, csi.ErrInvalidID)
	w.refuse(t, state.DeleteACLToken{Name: "../x"}, csi.ErrInvalidID)
}

// aclSnapshot carries the tokens, by hash only, through a snapshot.
func (s suite) aclSnapshot(t *testing.T) {
	mgmt, team := aclTestTokens()
	w := s.empty(t)
	aclReader(t, w)
	w.must(t, state.UpsertACLToken{Token: mgmt, Bootstrap: true})
	w.must(t, state.UpsertACLToken{Token: team})
	snap := snapshot(t, snapshotter(t, w))
	for _, secret := range []string{"mgmt-secret", "team-secret"} {
		if bytes.Contains(snap, []byte(secret)) {
			t.Errorf("the snapshot holds the token secret %q", secret)
		}
	}
	r := s.empty(t)
	if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(snap)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r.idx = w.idx
	if a, b := w.dump(t), r.dump(t); a != b {
		t.Errorf("restored store differs:\noriginal: %s\nrestored: %s", a, b)
	}
	if _, err := r.apply(t, state.UpsertACLToken{Token: mgmt, Bootstrap: true}); !errors.Is(err, state.ErrACLBootstrapped) {
		t.Errorf("a bootstrap after the restore: %v, want ErrACLBootstrapped", err)
	}
	// A snapshot without tokens (as every older one) restores over
	// a store with tokens and leaves none.
	empty := snapshot(t, snapshotter(t, s.empty(t)))
	if strings.Contains(string(empty), "acl") {
		t.Fatalf("a snapshot of an empty store names an ACL table: %s", empty)
	}
	if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(empty)); err != nil {
		t.Fatalf("Restore of a snapshot without tokens: %v", err)
	}
	if list, err := aclReader(t, r).ACLTokens(); err != nil || len(list) != 0 {
		t.Errorf("tokens after restoring a snapshot without any: %+v, %v", list, err)
	}
}
