package state_test

import (
	"errors"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func TestNode_CheckSecretHash(t *testing.T) {
	right := state.HashNodeSecret("the node's secret")
	for _, tc := range []struct {
		name   string
		secret string // the node's SecretHash
		hash   string // what the caller carries
		denied bool
	}{
		{"never registered, no hash", "", "", false},
		{"never registered, any hash", "", right, false},
		{"the node's own hash", right, right, false},
		{"no hash for a node with a secret", right, "", true},
		{"another secret's hash", right, state.HashNodeSecret("a guess"), true},
		{"a prefix of the hash", right, right[:len(right)-1], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &state.Node{ID: "n1", SecretHash: tc.secret}
			err := n.CheckSecretHash(tc.hash)
			if !tc.denied {
				if err != nil {
					t.Fatalf("CheckSecretHash = %v, want nil", err)
				}
				return
			}
			var ie *state.NodeIdentityError
			if !errors.As(err, &ie) || !errors.Is(err, csi.ErrPermissionDenied) || ie.NodeID != "n1" {
				t.Fatalf("CheckSecretHash = %v, want a *NodeIdentityError for n1 matching ErrPermissionDenied", err)
			}
		})
	}
}
