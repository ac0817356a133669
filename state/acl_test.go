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
