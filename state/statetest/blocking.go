package statetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

type waitResult struct {
	idx uint64
	err error
}

func (s suite) blocking(t *testing.T) {
	t.Run("IndexesFollowWrites", func(t *testing.T) {
		w := s.empty(t)
		want := map[state.Table]uint64{}
		check := func(step string) {
			t.Helper()
			for _, tb := range state.Tables() {
				if got := w.index(t, tb); got != want[tb] {
					t.Errorf("after %s: Index(%s) = %d, want %d", step, tb, got, want[tb])
				}
			}
		}
		check("nothing")
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{allocEBSNode("n1"), allocWeb(1, "n1")}})
		want[state.TableAllocations] = w.idx
		check("allocations")
		w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
			fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
		}})
		want[state.TableNodes], want[state.TablePlugins] = w.idx, w.idx
		check("fingerprint")
		v := volume(nsDefault, "shared", pluginEBS, fsMNMW)
		w.must(t, state.RegisterVolume{Volume: v})
		want[state.TableVolumes] = w.idx
		check("register")
		w.noop(t, state.RegisterVolume{Volume: v})
		check("unchanged register")
		w.refuse(t, claimCmd(nsDefault, "shared", claim("ghost", "n1", csi.ClaimRead, fsMNMW)), csi.ErrAllocationNotFound)
		check("refused claim")
	})

	t.Run("ReturnsAtOnceWhenPassed", func(t *testing.T) {
		w := s.standard(t)
		cur := w.index(t, state.TableVolumes)
		idx, err := w.s.Wait(context.Background(), state.TableVolumes, cur-1)
		if err != nil || idx != cur {
			t.Errorf("Wait(volumes, %d) = %d, %v; want %d at once", cur-1, idx, err, cur)
		}
	})

	t.Run("WakesOnWrite", func(t *testing.T) {
		w := s.standard(t)
		cur := w.index(t, state.TableVolumes)
		done := make(chan waitResult, 1)
		go func() {
			idx, err := w.s.Wait(context.Background(), state.TableVolumes, cur)
			done <- waitResult{idx, err}
		}()
		// A write to another table must not end the wait.
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{allocWeb(7, "n1")}})
		w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "new", pluginEBS, fsSNW)})
		r := <-done
		if r.err != nil || r.idx != w.idx {
			t.Errorf("Wait(volumes, %d) = %d, %v; want %d, the volume write", cur, r.idx, r.err, w.idx)
		}
	})

	t.Run("ContextEnds", func(t *testing.T) {
		w := s.standard(t)
		cur := w.index(t, state.TablePlugins)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan waitResult, 1)
		go func() {
			idx, err := w.s.Wait(ctx, state.TablePlugins, cur)
			done <- waitResult{idx, err}
		}()
		cancel()
		if r := <-done; !errors.Is(r.err, context.Canceled) {
			t.Errorf("Wait after cancel = %d, %v; want context.Canceled", r.idx, r.err)
		}
		past, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel2()
		if _, err := w.s.Wait(past, state.TablePlugins, cur); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait with an expired deadline: %v, want context.DeadlineExceeded", err)
		}
	})

	t.Run("UnknownTable", func(t *testing.T) {
		w := s.empty(t)
		if _, err := w.s.Index("bogus"); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Index(bogus): %v, want ErrInvalidRequest", err)
		}
		if _, err := w.s.Wait(context.Background(), "bogus", 0); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Wait(bogus): %v, want ErrInvalidRequest", err)
		}
	})

	t.Run("IndexOrder", func(t *testing.T) {
		w := s.standard(t)
		before := w.dump(t)
		_, err := w.s.Apply(w.idx-1, state.RegisterVolume{Volume: volume(nsDefault, "late", pluginEBS, fsSNW)})
		if !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Apply below the last index: %v, want ErrInvalidRequest", err)
		}
		if _, err := w.s.Apply(0, state.DeleteNode{NodeID: "n1"}); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Apply at index 0: %v, want ErrInvalidRequest", err)
		}
		if _, err := w.s.Apply(w.idx+1, nil); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("Apply(nil): %v, want ErrInvalidRequest", err)
		}
		if after := w.dump(t); after != before {
			t.Errorf("refused applies changed the store")
		}
		// Two commands at one index (a host that batches) are fine.
		w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "a", pluginEBS, fsSNW)})
		if _, err := w.s.Apply(w.idx, state.RegisterVolume{Volume: volume(nsDefault, "b", pluginEBS, fsSNW)}); err != nil {
			t.Errorf("second command at index %d: %v", w.idx, err)
		}
	})
}
