package state_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// TestMemStore_ACLTokens bootstraps a management token, refuses a
// second bootstrap, adds and deletes a namespace token, finds tokens by
// hash only, and carries them through a snapshot.
func TestMemStore_ACLTokens(t *testing.T) {
	s, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mgmt := state.ACLToken{Name: "management", Hash: state.HashNodeSecret("mgmt-secret"), Permissions: []csi.Permission{csi.PermOperator}}
	team := state.ACLToken{Name: "team-a", Hash: state.HashNodeSecret("team-secret"), Namespaces: []string{"team-a"},
		Permissions: []csi.Permission{csi.PermVolumeRead}}
	apply := func(idx uint64, cmd state.Command) error {
		_, err := s.Apply(idx, cmd)
		return err
	}
	if err := apply(1, state.UpsertACLToken{Token: mgmt, Bootstrap: true}); err != nil {
		t.Fatal(err)
	}
	if err := apply(2, state.UpsertACLToken{Token: team, Bootstrap: true}); !errors.Is(err, state.ErrACLBootstrapped) || !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("a second bootstrap: %v, want ErrACLBootstrapped", err)
	}
	if err := apply(3, state.UpsertACLToken{Token: team}); err != nil {
		t.Fatal(err)
	}
	stolen := team
	stolen.Name = "thief"
	if err := apply(4, state.UpsertACLToken{Token: stolen}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("a token with another token's hash: %v, want csi.ErrInvalidRequest", err)
	}
	bad := team
	bad.Permissions = []csi.Permission{"root"}
	if err := apply(4, state.UpsertACLToken{Token: bad}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("an unknown permission: %v, want csi.ErrInvalidRequest", err)
	}
	got, err := s.ACLTokenByHash(state.HashNodeSecret("team-secret"))
	if err != nil || got.Name != "team-a" || got.CreateIndex != 3 {
		t.Fatalf("ACLTokenByHash: %+v, %v", got, err)
	}
	if _, err := s.ACLTokenByHash(state.HashNodeSecret("nope")); !errors.Is(err, state.ErrACLTokenNotFound) {
		t.Fatalf("an unknown hash: %v", err)
	}

	var snap bytes.Buffer
	if err := s.Snapshot(context.Background(), &snap); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap.Bytes(), []byte("team-secret")) {
		t.Fatal("the snapshot holds a token secret")
	}
	restored, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := restored.Restore(context.Background(), &snap); err != nil {
		t.Fatal(err)
	}
	list, err := restored.ACLTokens()
	if err != nil || len(list) != 2 || list[0].Name != "management" || list[1].Name != "team-a" {
		t.Fatalf("restored tokens: %+v, %v", list, err)
	}

	if err := apply(5, state.DeleteACLToken{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ACLTokenByHash(team.Hash); !errors.Is(err, state.ErrACLTokenNotFound) {
		t.Fatalf("a deleted token: %v", err)
	}
}

// TestMemStore_Restore_ACLTokens restores a snapshot older than the ACL
// table (testdata/snapshot-v1.jsonl): it restores with no token, and
// the first bootstrap then works. A token row whose hash is not a
// SHA-256 (a secret in clear) is refused with ErrBadSnapshot.
func TestMemStore_Restore_ACLTokens(t *testing.T) {
	old, err := os.ReadFile("testdata/snapshot-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	s := newMemStore(t)
	if err := s.Restore(context.Background(), bytes.NewReader(old)); err != nil {
		t.Fatalf("Restore of a snapshot without the ACL table: %v", err)
	}
	if list, err := s.ACLTokens(); err != nil || len(list) != 0 {
		t.Fatalf("tokens after the restore: %+v, %v", list, err)
	}
	mgmt := state.ACLToken{Name: "management", Hash: state.HashNodeSecret("mgmt-secret"), Permissions: []csi.Permission{csi.PermOperator}}
	if _, err := s.Apply(1000, state.UpsertACLToken{Token: mgmt, Bootstrap: true}); err != nil {
		t.Fatalf("the first bootstrap after the restore: %v", err)
	}

	lines := strings.Split(strings.TrimSuffix(string(snapshotBytes(t, s)), "\n"), "\n")
	lines = lines[:len(lines)-1] // the trailer
	for i, l := range lines {
		if strings.HasPrefix(l, `{"table":"acl_tokens"`) {
			lines[i] = strings.Replace(l, mgmt.Hash, "mgmt-secret", 1)
		}
	}
	dst := newMemStore(t)
	err = dst.Restore(context.Background(), strings.NewReader(resealed(lines)))
	if !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), "HashNodeSecret") {
		t.Fatalf("Restore of a token row with a clear secret: %v, want ErrBadSnapshot naming HashNodeSecret", err)
	}
	if list, _ := dst.ACLTokens(); len(list) != 0 {
		t.Fatalf("a refused restore left tokens: %+v", list)
	}
}
