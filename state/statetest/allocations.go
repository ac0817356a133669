package statetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s suite) allocations(t *testing.T) {
	t.Run("UpsertAndRead", func(t *testing.T) {
		w := s.empty(t)
		a := alloc("web-1", nsDefault, "n1", "web", csi.AllocPlugin{PluginID: "p", Type: csi.PluginTypeNode})
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{a}})
		got, err := w.s.Allocation("web-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != a.ID || got.Namespace != a.Namespace || got.NodeID != a.NodeID || got.JobID != a.JobID ||
			got.TaskGroup != a.TaskGroup || got.Terminal || len(got.Plugins) != 1 || got.Plugins[0] != a.Plugins[0] {
			t.Errorf("Allocation(web-1) = %s, want %s", toJSON(got), toJSON(a))
		}
		if got.CreateIndex != w.idx || got.ModifyIndex != w.idx || w.index(t, state.TableAllocations) != w.idx {
			t.Errorf("indexes %d/%d, Index(allocations) %d, want %d", got.CreateIndex, got.ModifyIndex, w.index(t, state.TableAllocations), w.idx)
		}
		created := w.idx
		w.noop(t, state.UpsertAllocations{Allocations: []csi.Allocation{a}})
		a.TaskGroup = "web-canary"
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{a}})
		if got, _ := w.s.Allocation("web-1"); got.CreateIndex != created || got.ModifyIndex != w.idx || got.TaskGroup != "web-canary" {
			t.Errorf("after update: %s", toJSON(got))
		}
	})

	t.Run("Refused", func(t *testing.T) {
		w := s.standard(t)
		moved := allocWeb(1, "n2")
		renamed := allocWeb(1, "n1")
		renamed.Namespace = nsOther
		dupPlugin := alloc("p-1", nsDefault, "n1", "p",
			csi.AllocPlugin{PluginID: "p", Type: csi.PluginTypeNode}, csi.AllocPlugin{PluginID: "p", Type: csi.PluginTypeNode})
		badType := alloc("p-1", nsDefault, "n1", "p", csi.AllocPlugin{PluginID: "p", Type: "sidecar"})
		badPlugin := alloc("p-1", nsDefault, "n1", "p", csi.AllocPlugin{PluginID: "p/q", Type: csi.PluginTypeNode})
		for _, tc := range []struct {
			name    string
			cmd     state.Command
			want    error
			mention []string
		}{
			{"TerminalIsFinal", state.UpsertAllocations{Allocations: []csi.Allocation{alloc("dead-1", nsDefault, "n1", "web")}}, csi.ErrAllocationTerminal, []string{"dead-1"}},
			{"MoveNode", state.UpsertAllocations{Allocations: []csi.Allocation{moved}}, csi.ErrInvalidRequest, []string{"web-1", "n2"}},
			{"MoveNamespace", state.UpsertAllocations{Allocations: []csi.Allocation{renamed}}, csi.ErrInvalidRequest, []string{"web-1"}},
			{"TerminalWithoutTime", state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1"))}}, csi.ErrInvalidRequest, nil},
			{"DuplicateInBatch", state.UpsertAllocations{Allocations: []csi.Allocation{allocWeb(9, "n1"), allocWeb(9, "n1")}}, csi.ErrInvalidRequest, []string{"web-9"}},
			{"BadID", state.UpsertAllocations{Allocations: []csi.Allocation{alloc("", nsDefault, "n1", "web")}}, csi.ErrInvalidID, nil},
			{"BadNamespace", state.UpsertAllocations{Allocations: []csi.Allocation{alloc("x", "", "n1", "web")}}, csi.ErrInvalidID, nil},
			{"BadNode", state.UpsertAllocations{Allocations: []csi.Allocation{alloc("x", nsDefault, "n 1", "web")}}, csi.ErrInvalidID, nil},
			{"DuplicatePlugin", state.UpsertAllocations{Allocations: []csi.Allocation{dupPlugin}}, csi.ErrInvalidRequest, nil},
			{"BadPluginType", state.UpsertAllocations{Allocations: []csi.Allocation{badType}}, csi.ErrInvalidRequest, nil},
			{"BadPluginID", state.UpsertAllocations{Allocations: []csi.Allocation{badPlugin}}, csi.ErrInvalidID, nil},
			// The first allocation is fine; the batch fails as a whole.
			{"BatchIsAtomic", state.UpsertAllocations{Allocations: []csi.Allocation{allocWeb(8, "n1"), moved}}, csi.ErrInvalidRequest, nil},
			{"DeleteRunning", state.DeleteAllocations{AllocationIDs: []string{"dead-1", "web-1"}}, csi.ErrInvalidRequest, []string{"web-1"}},
			{"DeleteBadID", state.DeleteAllocations{AllocationIDs: []string{""}}, csi.ErrInvalidID, nil},
		} {
			t.Run(tc.name, func(t *testing.T) { w.refuse(t, tc.cmd, tc.want, tc.mention...) })
		}
	})

	t.Run("ByNode", func(t *testing.T) {
		w := s.standard(t)
		ids := func(t *testing.T, node string) []string {
			t.Helper()
			allocs, err := w.s.AllocationsByNode(node)
			if err != nil {
				t.Fatalf("AllocationsByNode(%s): %v", node, err)
			}
			out := []string{}
			for _, a := range allocs {
				if a.NodeID != node {
					t.Errorf("AllocationsByNode(%s) lists %s, which is on %s", node, a.ID, a.NodeID)
				}
				out = append(out, a.ID)
			}
			return out
		}
		for _, tc := range []struct {
			node string
			want []string
		}{
			// Terminal allocations (dead-1) and other namespaces (batch-1)
			// included.
			{"n1", []string{"batch-1", "dead-1", "ebs-ctl-1", "ebs-node-1", "web-1", "web-3"}},
			{"n2", []string{"ebs-node-2", "web-2"}},
			{"n3", []string{"web-4"}},
			{"n9", []string{}},
		} {
			t.Run(tc.node, func(t *testing.T) {
				if got := ids(t, tc.node); !slices.Equal(got, tc.want) {
					t.Errorf("AllocationsByNode(%s) = %v, want %v", tc.node, got, tc.want)
				}
			})
		}

		// Updates show, a new allocation joins its node, deletes leave.
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(2, "n2")), allocWeb(0, "n2")}, ReleasedAt: t0})
		allocs, err := w.s.AllocationsByNode("n2")
		if err != nil || len(allocs) != 3 || allocs[0].ID != "ebs-node-2" || allocs[1].ID != "web-0" || allocs[2].ID != "web-2" ||
			!allocs[2].Terminal || allocs[2].ModifyIndex != w.idx {
			t.Errorf("AllocationsByNode(n2) after upsert = %s, %v; want ebs-node-2, web-0, web-2 (terminal, at %d)", toJSON(allocs), err, w.idx)
		}
		w.must(t, state.DeleteAllocations{AllocationIDs: []string{"web-2", "dead-1"}})
		if got, want := ids(t, "n2"), []string{"ebs-node-2", "web-0"}; !slices.Equal(got, want) {
			t.Errorf("AllocationsByNode(n2) after delete = %v, want %v", got, want)
		}
		if got, want := ids(t, "n1"), []string{"batch-1", "ebs-ctl-1", "ebs-node-1", "web-1", "web-3"}; !slices.Equal(got, want) {
			t.Errorf("AllocationsByNode(n1) after delete = %v, want %v", got, want)
		}

		// The caller owns what it gets.
		before := w.dump(t)
		allocs, _ = w.s.AllocationsByNode("n1")
		for _, a := range allocs {
			a.NodeID, a.Terminal = "n9", true
			if len(a.Plugins) > 0 {
				a.Plugins[0].PluginID = "changed"
			}
		}
		if after := w.dump(t); after != before {
			t.Errorf("changing returned allocations changed the store:\nbefore: %s\nafter:  %s", before, after)
		}

		if _, err := w.s.AllocationsByNode("n/1"); !errors.Is(err, csi.ErrInvalidID) {
			t.Errorf("AllocationsByNode(n/1): %v, want an error matching csi.ErrInvalidID", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1"))}, ReleasedAt: t0})
		w.must(t, state.DeleteAllocations{AllocationIDs: []string{"web-1", "dead-1", "never-seen"}})
		for _, id := range []string{"web-1", "dead-1"} {
			if _, err := w.s.Allocation(id); !errors.Is(err, csi.ErrAllocationNotFound) {
				t.Errorf("Allocation(%s) after delete: %v", id, err)
			}
		}
		// The past claim stays until the release worker frees it.
		if c := w.volume(t, nsDefault, "shared").PastClaims["web-1"]; c == nil {
			t.Errorf("deleting the allocation dropped its past claim")
		}
		w.noop(t, state.DeleteAllocations{AllocationIDs: []string{"web-1"}})
	})
}
