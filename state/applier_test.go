package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func TestLocalApplier_Apply_Indexes(t *testing.T) {
	ctx := context.Background()
	s := newMemStore(t)
	a := state.NewLocalApplier(s)
	upsert := func(id string) state.Command {
		return state.UpsertAllocations{Allocations: []csi.Allocation{{ID: id, Namespace: "default", NodeID: "n1"}}}
	}
	for i, want := range []uint64{1, 2, 3} {
		res, err := a.Apply(ctx, upsert(fmt.Sprintf("a%d", i)))
		if err != nil || res.Index != want || !res.Changed {
			t.Errorf("Apply %d = %+v, %v; want index %d", i, res, err, want)
		}
	}
	if _, err := a.Apply(ctx, state.DeleteNode{NodeID: "../x"}); !errors.Is(err, csi.ErrInvalidID) {
		t.Errorf("refused command: %v", err)
	}
	if res, err := a.Apply(ctx, upsert("a9")); err != nil || res.Index != 4 {
		t.Errorf("after a refused command: %+v, %v; want index 4", res, err)
	}

	// A restore from a store further along moves the applier along.
	ahead, last := smallCluster(t)
	for range 10 {
		last++
		if _, err := ahead.Apply(last, upsert(fmt.Sprintf("b%d", last))); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if err := ahead.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Apply(ctx, upsert("c1")); err != nil || res.Index != last+1 {
		t.Errorf("after restore: %+v, %v; want index %d", res, err, last+1)
	}
}

func TestLocalApplier_Apply_ContextDone(t *testing.T) {
	s := newMemStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := state.NewLocalApplier(s).Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "a", Namespace: "default", NodeID: "n1"}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled ctx: %v", err)
	}
	if idx, _ := s.Index(state.TableAllocations); idx != 0 {
		t.Errorf("a canceled Apply wrote at %d", idx)
	}
}

// TestLocalApplier_Apply_Concurrent applies from many goroutines while
// others read; under -race this checks the concurrency contract, and
// every command gets its own index.
func TestLocalApplier_Apply_Concurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := smallCluster(t)
	a := state.NewLocalApplier(s)
	const writers, perWriter = 4, 25
	var wg sync.WaitGroup
	indexes := make(chan uint64, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				res, err := a.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{
					{ID: fmt.Sprintf("w%d-%d", w, i), Namespace: "default", NodeID: "n1"},
				}})
				if err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				indexes <- res.Index
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := s.Volume("default", "v1")
				if err != nil || v.WriteClaims["web-1"] == nil {
					t.Errorf("Volume(default, v1) = %v, %v", v, err)
					return
				}
				if _, err := s.Plugin("hp"); err != nil {
					t.Errorf("Plugin(hp): %v", err)
					return
				}
				if _, err := s.VolumesByNode("n1"); err != nil {
					t.Errorf("VolumesByNode: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(indexes)
	seen := map[uint64]bool{}
	for idx := range indexes {
		if seen[idx] {
			t.Errorf("index %d handed out twice", idx)
		}
		seen[idx] = true
	}
	if len(seen) != writers*perWriter {
		t.Errorf("%d distinct indexes, want %d", len(seen), writers*perWriter)
	}
}

// TestMemStore_Apply_ConcurrentReads rewrites a volume with nested
// options while readers copy it: stored objects must never be written
// after they are stored (checked under -race).
func TestMemStore_Apply_ConcurrentReads(t *testing.T) {
	s, last := smallCluster(t)
	v, err := s.Volume("default", "v1")
	if err != nil {
		t.Fatal(err)
	}
	v.MountOptions = &csi.MountOptions{FSType: "xfs", MountFlags: []string{"noatime"}}
	v.RequestedTopologies = &csi.TopologyRequest{Required: []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}}
	last++
	if _, err := s.Apply(last, state.RegisterVolume{Volume: *v}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Volume("default", "v1"); err != nil {
					t.Errorf("Volume: %v", err)
					return
				}
			}
		})
	}
	for i := range 200 {
		last++
		cmd := state.SetPublishContext{Namespace: "default", VolumeID: "v1", AllocationID: "web-1",
			PublishContext: map[string]string{"n": fmt.Sprint(i)}}
		if _, err := s.Apply(last, cmd); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	readers.Wait()
}
