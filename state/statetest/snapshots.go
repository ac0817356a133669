package statetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func snapshotter(t *testing.T, w *world) state.Snapshotter {
	t.Helper()
	sn, ok := w.s.(state.Snapshotter)
	if !ok {
		t.Skip("the store is not a state.Snapshotter")
	}
	return sn
}

func snapshot(t *testing.T, sn state.Snapshotter) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := sn.Snapshot(context.Background(), &b); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return b.Bytes()
}

// cuts returns about n offsets spread over [0, size), plus both ends.
func cuts(size, n int) []int {
	out := []int{0, 1, size - 2, size - 1}
	step := max(size/n, 1)
	for i := step; i < size-2; i += step {
		out = append(out, i)
	}
	return out
}

func (s suite) snapshots(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		w := s.scenario(t)
		snap := snapshot(t, snapshotter(t, w))
		r := s.standard(t) // restore replaces whatever was there
		rs := snapshotter(t, r)
		if err := rs.Restore(context.Background(), bytes.NewReader(snap)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		r.nodes, r.allocs, r.idx = maps.Clone(w.nodes), maps.Clone(w.allocs), w.idx
		if a, b := w.dump(t), r.dump(t); a != b {
			t.Errorf("restored store differs:\noriginal: %s\nrestored: %s", a, b)
		}
		// The past-claims index is rebuilt by the restore, not only the
		// volumes.
		if got, want := stampStrings(r.pastStamps(t)), stampStrings(w.pastStamps(t)); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("PastClaimVolumeIDs after restore = %v, want %v (not empty)", got, want)
		}
		if a, b := toJSON(allocationsOn(t, w, "n1")), toJSON(allocationsOn(t, r, "n1")); a != b || a == "null" {
			t.Errorf("AllocationsByNode(n1) after restore = %s, want %s (not empty)", b, a)
		}
		if again := snapshot(t, rs); !bytes.Equal(again, snap) {
			t.Errorf("snapshot of the restored store differs from the one restored")
		}
		// Both go on identically, claims and fingerprints included.
		for _, cmd := range []state.Command{
			claimCmd(nsDefault, "logs", claim("web-3", "n1", csi.ClaimRead, fsMNR)),
			state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true)}},
			state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(3, "n1"))}, ReleasedAt: t0},
		} {
			w.must(t, cmd)
			r.must(t, cmd)
		}
		if a, b := w.dump(t), r.dump(t); a != b {
			t.Errorf("stores diverged after the restore:\noriginal: %s\nrestored: %s", a, b)
		}
	})

	t.Run("RestoreIntoEmpty", func(t *testing.T) {
		w := s.empty(t)
		snap := snapshot(t, snapshotter(t, w))
		r := s.standard(t)
		if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(snap)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if vols, _ := r.s.Volumes("", ""); len(vols) != 0 {
			t.Errorf("after restoring an empty snapshot: %d volumes", len(vols))
		}
		if idx := r.index(t, state.TableVolumes); idx != 0 {
			t.Errorf("Index(volumes) = %d after restoring an empty snapshot", idx)
		}
	})

	t.Run("TruncatedOrCorrupted", func(t *testing.T) {
		w := s.scenario(t)
		snap := snapshot(t, snapshotter(t, w))
		r := s.standard(t)
		rs := snapshotter(t, r)
		before := r.dump(t)
		check := func(t *testing.T, what string, data []byte) {
			t.Helper()
			err := rs.Restore(context.Background(), bytes.NewReader(data))
			if !errors.Is(err, state.ErrBadSnapshot) {
				t.Errorf("Restore of %s: %v, want an error matching state.ErrBadSnapshot", what, err)
			}
			if after := r.dump(t); after != before {
				t.Errorf("a failed Restore of %s changed the store", what)
			}
		}
		for _, n := range cuts(len(snap), 40) {
			check(t, fmt.Sprintf("the first %d of %d bytes", n, len(snap)), snap[:n])
		}
		for _, n := range cuts(len(snap), 40) {
			bad := bytes.Clone(snap)
			bad[n] ^= 0x01
			check(t, fmt.Sprintf("a snapshot with byte %d flipped", n), bad)
		}
		check(t, "a snapshot with data after the trailer", append(bytes.Clone(snap), snap...))
		check(t, "garbage", []byte("not a snapshot\n"))
		// The store still works.
		r.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
	})

	t.Run("RestoreEndsWaits", func(t *testing.T) {
		w := s.empty(t)
		snap := snapshot(t, snapshotter(t, w))
		r := s.standard(t)
		rs := snapshotter(t, r)
		cur := r.index(t, state.TableVolumes)
		done := make(chan waitResult, 1)
		go func() {
			idx, err := r.s.Wait(context.Background(), state.TableVolumes, cur)
			done <- waitResult{idx, err}
		}()
		// The waiter may start before or after any one restore; restoring
		// until it returns needs no timing assumption.
		for {
			if err := rs.Restore(context.Background(), bytes.NewReader(snap)); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			select {
			case res := <-done:
				if res.err != nil || res.idx != 0 {
					t.Errorf("Wait across a restore = %d, %v; want 0 (the restored index), nil", res.idx, res.err)
				}
				return
			default:
				runtime.Gosched()
			}
		}
	})
}

func allocationsOn(t *testing.T, w *world, node string) []*csi.Allocation {
	t.Helper()
	allocs, err := w.s.AllocationsByNode(node)
	if err != nil {
		t.Fatalf("AllocationsByNode(%s): %v", node, err)
	}
	return allocs
}
