package statetest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// expansions checks the expansion and modify commands.
func (s suite) expansions(t *testing.T) {
	req := func(required int64, ctrl bool) state.RequestExpansion {
		return state.RequestExpansion{Namespace: nsDefault, VolumeID: "shared", RequiredBytes: required, Controller: ctrl, RequestedAt: t0}
	}
	// sized is the standard world with default/shared at 1 GiB, claimed
	// on n1 and n2.
	sized := func(t *testing.T) *world {
		t.Helper()
		w := s.standard(t)
		v := volume(nsDefault, "shared", pluginEBS, fsMNMW)
		v.Capacity = 1 << 30
		w.must(t, state.RegisterVolume{Volume: v})
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimWrite, fsMNMW)))
		return w
	}
	exp := func(t *testing.T, w *world) *csi.Expansion {
		t.Helper()
		return w.volume(t, nsDefault, "shared").Expansion
	}

	t.Run("ControllerThenNodes", func(t *testing.T) {
		w := sized(t)
		w.must(t, req(2<<30, true))
		e := exp(t, w)
		if e == nil || e.State != csi.ExpansionController || e.RequiredBytes != 2<<30 || !e.RequestedAt.Equal(t0) {
			t.Fatalf("after the intent: %s", toJSON(e))
		}
		w.noop(t, req(2<<30, true))
		w.must(t, state.RecordControllerExpansion{Namespace: nsDefault, VolumeID: "shared", Capacity: 2 << 30, NodeExpansionRequired: true})
		v := w.volume(t, nsDefault, "shared")
		if v.Capacity != 2<<30 || v.Expansion.State != csi.ExpansionNode || !reflect.DeepEqual(v.Expansion.PendingNodes, []string{"n1", "n2"}) {
			t.Fatalf("after the controller step: capacity %d, %s", v.Capacity, toJSON(v.Expansion))
		}
		w.noop(t, state.RecordControllerExpansion{Namespace: nsDefault, VolumeID: "shared", Capacity: 2 << 30, NodeExpansionRequired: true})
		w.must(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n2", Capacity: 2 << 30})
		w.noop(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n2", Capacity: 2 << 30})
		if e := exp(t, w); e.State != csi.ExpansionNode || !e.NeedsNode("n1") || e.NeedsNode("n2") {
			t.Fatalf("after n2: %s", toJSON(e))
		}
		w.noop(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n3", NotMounted: true})
		w.must(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1", NotMounted: true})
		e = exp(t, w)
		if e.State != csi.ExpansionDone || e.PendingNodes != nil || !reflect.DeepEqual(e.DoneNodes, []string{"n2"}) || !e.NeedsNode("n1") {
			t.Fatalf("after n1, which holds no mount: %s", toJSON(e))
		}
		// A node staging the volume later still needs the node step.
		if !e.NeedsNode("n3") {
			t.Errorf("NeedsNode(n3) = false after a node expansion")
		}
		w.must(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n3"})
		if e := exp(t, w); e.NeedsNode("n3") || e.State != csi.ExpansionDone {
			t.Errorf("after n3: %s", toJSON(e))
		}
	})

	t.Run("ControllerOnly", func(t *testing.T) {
		w := sized(t)
		w.must(t, req(2<<30, true))
		w.must(t, state.RecordControllerExpansion{Namespace: nsDefault, VolumeID: "shared", Capacity: 3 << 30})
		w.noop(t, req(2<<30, true)) // a repeat of the expansion just done
		if e := exp(t, w); e.State != csi.ExpansionDone || e.NodeRequired || e.NeedsNode("n1") {
			t.Errorf("controller-only expansion: %s", toJSON(e))
		}
		if c := w.volume(t, nsDefault, "shared").Capacity; c != 3<<30 {
			t.Errorf("capacity %d, want the controller's 3 GiB", c)
		}
	})

	t.Run("NodeOnly", func(t *testing.T) {
		w := sized(t)
		w.must(t, req(2<<30, false))
		if e := exp(t, w); e.State != csi.ExpansionNode || !reflect.DeepEqual(e.PendingNodes, []string{"n1", "n2"}) {
			t.Errorf("node-only expansion: %s", toJSON(e))
		}
		// Without claims or attachments it is done at once.
		w.must(t, state.RequestExpansion{Namespace: nsDefault, VolumeID: "logs", RequiredBytes: 1 << 30, RequestedAt: t0})
		if e := w.volume(t, nsDefault, "logs").Expansion; e.State != csi.ExpansionDone || !e.NeedsNode("n1") {
			t.Errorf("node-only expansion of an unclaimed volume: %s", toJSON(e))
		}
	})

	t.Run("Refused", func(t *testing.T) {
		w := sized(t)
		w.refuse(t, req(1<<29, true), csi.ErrShrinkRefused, "default/shared")
		w.refuse(t, req(0, true), csi.ErrInvalidRequest)
		bad := req(2<<30, true)
		bad.LimitBytes = 1 << 30
		w.refuse(t, bad, csi.ErrInvalidRequest)
		w.refuse(t, state.RequestExpansion{Namespace: nsDefault, VolumeID: "nope", RequiredBytes: 1, RequestedAt: t0}, csi.ErrVolumeNotFound)
		w.must(t, req(2<<30, true))
		w.refuse(t, req(3<<30, true), csi.ErrVolumeInUse, "in progress")
		w.refuse(t, state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "bad/node"}, csi.ErrInvalidID)
	})

	t.Run("Errors", func(t *testing.T) {
		w := sized(t)
		w.must(t, req(2<<30, true))
		w.must(t, state.RecordExpansionError{Namespace: nsDefault, VolumeID: "shared", Error: strings.Repeat("x", 2*state.MaxClaimError)})
		if e := exp(t, w); len(e.LastError) != state.MaxClaimError || e.State != csi.ExpansionController {
			t.Errorf("error not kept, or not cut: %d bytes, %s", len(e.LastError), e.State)
		}
		w.must(t, state.RecordExpansionError{Namespace: nsDefault, VolumeID: "shared", Error: "refused", Final: true})
		if e := exp(t, w); e != nil {
			t.Errorf("a final controller error kept the intent: %s", toJSON(e))
		}
		w.noop(t, state.RecordExpansionError{Namespace: nsDefault, VolumeID: "shared", Error: "late"})
	})

	t.Run("RegisterKeepsExpansion", func(t *testing.T) {
		w := sized(t)
		w.must(t, req(2<<30, true))
		v := volume(nsDefault, "shared", pluginEBS, fsMNMW)
		v.Capacity = 1 << 30
		v.Name = "renamed"
		w.must(t, state.RegisterVolume{Volume: v})
		if e := exp(t, w); e == nil || e.State != csi.ExpansionController {
			t.Errorf("a registration update dropped the pending expansion: %s", toJSON(e))
		}
	})

	t.Run("Modify", func(t *testing.T) {
		w := sized(t)
		mod := state.RequestModify{Namespace: nsDefault, VolumeID: "shared", Parameters: map[string]string{"iops": "3000"}}
		w.refuse(t, state.RequestModify{Namespace: nsDefault, VolumeID: "shared"}, csi.ErrInvalidRequest)
		w.noop(t, state.RecordModify{Namespace: nsDefault, VolumeID: "shared"})
		w.must(t, mod)
		w.noop(t, mod)
		w.refuse(t, state.RequestModify{Namespace: nsDefault, VolumeID: "shared", Parameters: map[string]string{"iops": "1"}}, csi.ErrVolumeInUse)
		w.must(t, state.RecordModify{Namespace: nsDefault, VolumeID: "shared"})
		v := w.volume(t, nsDefault, "shared")
		if !reflect.DeepEqual(v.MutableParameters, map[string]string{"iops": "3000"}) || v.ModifyingParameters != nil {
			t.Errorf("after the modify: mutable %v, modifying %v", v.MutableParameters, v.ModifyingParameters)
		}
		w.must(t, state.RequestModify{Namespace: nsDefault, VolumeID: "shared", Parameters: map[string]string{"tier": "fast"}})
		w.must(t, state.RecordModify{Namespace: nsDefault, VolumeID: "shared", Failed: true})
		v = w.volume(t, nsDefault, "shared")
		if !reflect.DeepEqual(v.MutableParameters, map[string]string{"iops": "3000"}) || v.ModifyingParameters != nil {
			t.Errorf("after a failed modify: mutable %v, modifying %v", v.MutableParameters, v.ModifyingParameters)
		}
	})

	t.Run("EncodeDecode", func(t *testing.T) {
		for _, c := range []state.Command{
			req(2<<30, true),
			state.RecordControllerExpansion{Namespace: nsDefault, VolumeID: "shared", Capacity: 2, NodeExpansionRequired: true},
			state.RecordNodeExpansion{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1", Capacity: 2},
			state.RecordExpansionError{Namespace: nsDefault, VolumeID: "shared", Error: "e", Final: true},
			state.RequestModify{Namespace: nsDefault, VolumeID: "shared", Parameters: map[string]string{"a": "b"}},
			state.RecordModify{Namespace: nsDefault, VolumeID: "shared", Failed: true},
		} {
			b, err := state.EncodeCommand(c)
			if err != nil {
				t.Fatalf("encode %s: %v", c.Kind(), err)
			}
			got, err := state.DecodeCommand(b)
			if err != nil || !reflect.DeepEqual(got, c) {
				t.Errorf("decode %s: %#v, %v; want %#v", c.Kind(), got, err, c)
			}
		}
	})
}
