package statetest

import (
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// nodeIdentity checks RegisterNode and the secret a registered node's
// reports must carry: the node hijack by re-registration is refused
// with nothing written, and the error names no hash.
func (s suite) nodeIdentity(t *testing.T) {
	secret, other := state.HashNodeSecret("secret-of-n1"), state.HashNodeSecret("attacker")
	reg := state.RegisterNode{NodeID: "n1", SecretHash: secret, Address: "10.0.0.1:4647"}
	report := func(hash string) state.UpsertNodePlugins {
		return state.UpsertNodePlugins{NodeID: "n1", SecretHash: hash,
			Plugins: []csi.PluginInfo{fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "", true)}}
	}
	t.Run("FirstRegistrationSetsIdentity", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, reg)
		n, err := w.s.Node("n1")
		if err != nil || n.SecretHash != secret || n.Address != reg.Address {
			t.Fatalf("Node(n1) = %+v, %v; want the registered hash and address", n, err)
		}
		w.noop(t, reg)
	})
	t.Run("HijackRefused", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, reg)
		w.must(t, report(secret))
		hijack := reg
		hijack.SecretHash, hijack.Address = other, "10.9.9.9:4647"
		if err := w.refuseErr(t, hijack, csi.ErrPermissionDenied, "n1", "secret"); err != nil {
			for _, h := range []string{secret, other} {
				if strings.Contains(err.Error(), h) {
					t.Errorf("refusal %q shows a secret hash", err)
				}
			}
		}
		sameAddr := reg
		sameAddr.SecretHash = other
		w.refuse(t, sameAddr, csi.ErrPermissionDenied, "n1", "secret")
	})
	t.Run("SameSecretMoves", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, reg)
		moved := reg
		moved.Address = "10.0.0.1:5000"
		w.must(t, moved)
		if n, err := w.s.Node("n1"); err != nil || n.Address != moved.Address || n.SecretHash != secret {
			t.Fatalf("Node(n1) = %+v, %v; want the new address and the same hash", n, err)
		}
	})
	t.Run("ReportsCarryTheSecret", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, reg)
		w.refuse(t, report(""), csi.ErrPermissionDenied, "n1")
		w.refuse(t, report(other), csi.ErrPermissionDenied, "n1")
		w.must(t, report(secret))
		n, err := w.s.Node("n1")
		if err != nil || n.SecretHash != secret || n.Address != reg.Address || len(n.Plugins) != 1 {
			t.Fatalf("after a report Node(n1) = %+v, %v; want its identity kept and one plugin", n, err)
		}
	})
	t.Run("NodeKnownFromReportsRegisters", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, report(""))
		w.must(t, reg)
		n, err := w.s.Node("n1")
		if err != nil || n.SecretHash != secret || len(n.Plugins) != 1 {
			t.Fatalf("Node(n1) = %+v, %v; want the identity and the reported plugin", n, err)
		}
	})
	t.Run("DeletedNodeRegistersAgain", func(t *testing.T) {
		w := s.empty(t)
		w.must(t, reg)
		w.must(t, state.DeleteNode{NodeID: "n1"})
		w.must(t, state.RegisterNode{NodeID: "n1", SecretHash: other, Address: "10.0.0.2:4647"})
	})
	t.Run("Invalid", func(t *testing.T) {
		w := s.empty(t)
		w.refuse(t, state.RegisterNode{NodeID: "../n", SecretHash: secret, Address: "a:1"}, csi.ErrInvalidID)
		w.refuse(t, state.RegisterNode{NodeID: "n1", SecretHash: "secret-in-clear", Address: "a:1"}, csi.ErrInvalidRequest, "HashNodeSecret")
		w.refuse(t, state.RegisterNode{NodeID: "n1", SecretHash: secret}, csi.ErrInvalidRequest, "address")
		w.refuse(t, state.RegisterNode{NodeID: "n1", SecretHash: secret, Address: "a:1\nx"}, csi.ErrInvalidRequest, "address")
	})
}
