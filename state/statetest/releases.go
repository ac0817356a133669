package statetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

func (s suite) releases(t *testing.T) {
	// claimed is the standard world with web-1 writing default/data and
	// reading default/shared, and web-2 reading default/shared.
	claimed := func(t *testing.T) *world {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)))
		w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimRead, fsMNMW)))
		return w
	}

	t.Run("ReleaseClaims", func(t *testing.T) {
		w := claimed(t)
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		for _, id := range []string{"data", "shared"} {
			v := w.volume(t, nsDefault, id)
			c := v.PastClaims["web-1"]
			if c == nil || v.Claim("web-1") != c {
				t.Errorf("%s: web-1's claim is not only a past claim: %s", id, toJSON(v))
				continue
			}
			if c.State != csi.ClaimUnpublishing || !c.ReleasedAt.Equal(t0) {
				t.Errorf("%s: past claim = %s, want unpublishing released at %v", id, toJSON(c), t0)
			}
		}
		if c := w.volume(t, nsDefault, "shared").ReadClaims["web-2"]; c == nil || c.State != csi.ClaimTaken {
			t.Errorf("web-2's claim changed: %s", toJSON(c))
		}
		vols, err := w.s.VolumesWithPastClaims()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(volumeIDs(vols), ","); got != "default/data,default/shared" {
			t.Errorf("VolumesWithPastClaims = %s", got)
		}
		if vols, _ := w.s.VolumesByNode("n1"); len(vols) != 2 {
			t.Errorf("VolumesByNode(n1) = %v, want the volumes with past claims there too", volumeIDs(vols))
		}
		w.noop(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		w.noop(t, state.ReleaseClaims{AllocationID: "web-3", ReleasedAt: t0})
		// A released allocation cannot claim the volume again.
		w.refuse(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimRead, fsMNMW)), csi.ErrAllocationTerminal, "web-1")
	})

	t.Run("ReleaseNeedsTime", func(t *testing.T) {
		w := claimed(t)
		w.refuse(t, state.ReleaseClaims{AllocationID: "web-1"}, csi.ErrInvalidRequest, "web-1")
		w.refuse(t, state.ReleaseClaims{AllocationID: "", ReleasedAt: t0}, csi.ErrInvalidID)
	})

	t.Run("TerminalAllocationReleases", func(t *testing.T) {
		w := claimed(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1"))}, ReleasedAt: t0})
		for _, id := range []string{"data", "shared"} {
			c := w.volume(t, nsDefault, id).PastClaims["web-1"]
			if c == nil || c.State != csi.ClaimUnpublishing || !c.ReleasedAt.Equal(t0) {
				t.Errorf("%s: web-1's claim after its allocation stopped = %s", id, toJSON(c))
			}
		}
		// One transaction: both tables moved to the same index.
		if v, a := w.index(t, state.TableVolumes), w.index(t, state.TableAllocations); v != w.idx || a != w.idx {
			t.Errorf("Index(volumes) %d, Index(allocations) %d, want both %d", v, a, w.idx)
		}
	})

	t.Run("TerminalAllocationsTogether", func(t *testing.T) {
		// Two allocations sharing a volume stop in one upsert: each of
		// their claims becomes a past claim, in one write of each volume.
		w := claimed(t)
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1")), terminal(allocWeb(2, "n2"))}, ReleasedAt: t0})
		want := map[string][]string{"data": {"web-1"}, "shared": {"web-1", "web-2"}}
		for id, allocs := range want {
			v := w.volume(t, nsDefault, id)
			if len(v.ReadClaims)+len(v.WriteClaims) != 0 || len(v.PastClaims) != len(allocs) {
				t.Errorf("%s after both allocations stopped: %s, want only past claims of %v", id, toJSON(v), allocs)
			}
			for _, a := range allocs {
				if c := v.PastClaims[a]; c == nil || c.State != csi.ClaimUnpublishing || !c.ReleasedAt.Equal(t0) {
					t.Errorf("%s: %s's claim = %s, want unpublishing released at %v", id, a, toJSON(c), t0)
				}
			}
			if v.ModifyIndex != w.idx {
				t.Errorf("%s: ModifyIndex %d, want %d", id, v.ModifyIndex, w.idx)
			}
		}
	})

	t.Run("Checkpoints", func(t *testing.T) {
		w := claimed(t)
		cp := func(alloc string, st csi.ClaimState) state.CheckpointClaim {
			return state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: alloc, State: st}
		}
		w.refuse(t, cp("web-1", csi.ClaimNodeDetached), csi.ErrInvalidRequest, "web-1", "live")
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		w.must(t, state.RecordClaimError{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", Error: "node n1 unreachable"})
		if c := w.volume(t, nsDefault, "shared").PastClaims["web-1"]; c.LastError != "node n1 unreachable" {
			t.Errorf("LastError = %q", c.LastError)
		}
		w.noop(t, cp("web-1", csi.ClaimUnpublishing))
		w.must(t, cp("web-1", csi.ClaimNodeDetached))
		c := w.volume(t, nsDefault, "shared").PastClaims["web-1"]
		if c.State != csi.ClaimNodeDetached || c.LastError != "" {
			t.Errorf("after checkpoint: %s, want node-detached with LastError cleared", toJSON(c))
		}
		w.noop(t, cp("web-1", csi.ClaimNodeDetached))
		w.refuse(t, cp("web-1", csi.ClaimUnpublishing), csi.ErrInvalidRequest, "forward")
		w.refuse(t, cp("web-1", csi.ClaimTaken), csi.ErrInvalidRequest)
		w.refuse(t, cp("web-1", csi.ClaimState(42)), csi.ErrInvalidRequest)
		w.refuse(t, cp("web-3", csi.ClaimControllerDetached), csi.ErrClaimNotFound, "web-3")
		// Steps may be skipped forward.
		w.must(t, cp("web-1", csi.ClaimReadyToFree))
		w.refuse(t, cp("web-1", csi.ClaimControllerDetached), csi.ErrInvalidRequest)
	})

	t.Run("RecordClaimError", func(t *testing.T) {
		w := claimed(t)
		long := strings.Repeat("é", state.MaxClaimError)
		w.must(t, state.RecordClaimError{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", Error: long})
		got := w.volume(t, nsDefault, "data").WriteClaims["web-1"].LastError
		if len(got) > state.MaxClaimError || !strings.HasPrefix(long, got) || len(got) < state.MaxClaimError-4 {
			t.Errorf("LastError of %d bytes, want a prefix of at most %d bytes", len(got), state.MaxClaimError)
		}
		w.noop(t, state.RecordClaimError{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", Error: long})
		w.refuse(t, state.RecordClaimError{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-2", Error: "x"}, csi.ErrClaimNotFound)
	})

	t.Run("Free", func(t *testing.T) {
		w := claimed(t)
		free := state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"}
		w.refuse(t, free, csi.ErrInvalidRequest, "web-1", "live")
		w.must(t, state.UpsertAllocations{Allocations: []csi.Allocation{terminal(allocWeb(1, "n1"))}, ReleasedAt: t0})
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimReadyToFree})
		// web-1 holds the last claim on n1: the volume is attached there
		// until its attachment goes, and the free goes with it.
		w.refuse(t, free, csi.ErrVolumeInUse, "web-1", "n1")
		w.must(t, state.Batch{Commands: []state.Command{
			state.RemoveAttachment{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"},
			free,
		}})
		if v := w.volume(t, nsDefault, "data"); v.InUse() {
			t.Errorf("volume still claimed after free: %s", toJSON(v))
		}
		// A second free is refused as already done (csi.ErrClaimNotFound).
		w.refuse(t, free, csi.ErrClaimNotFound, "web-1")
		vols, err := w.s.VolumesWithPastClaims()
		if err != nil || len(vols) != 1 || vols[0].ID != "shared" {
			t.Errorf("VolumesWithPastClaims after free = %v, %v; want default/shared", volumeIDs(vols), err)
		}
		// The freed volume can be claimed from another node now.
		w.must(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))
	})

	t.Run("PastClaimVolumeIDs", func(t *testing.T) {
		w := claimed(t)
		check := func(t *testing.T, want ...string) {
			t.Helper()
			if got := stampStrings(w.pastStamps(t)); !slices.Equal(got, want) {
				t.Errorf("PastClaimVolumeIDs = %v, want %v", got, want)
			}
		}
		at := func(ns, id string, idx uint64) string { return fmt.Sprintf("%s/%s@%d", ns, id, idx) }
		check(t)
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		released := w.idx
		check(t, at(nsDefault, "data", released), at(nsDefault, "shared", released))

		// A checkpoint moves the index of its own volume only.
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", State: csi.ClaimReadyToFree})
		checkpointed := w.idx
		check(t, at(nsDefault, "data", released), at(nsDefault, "shared", checkpointed))

		// Another namespace sorts after default.
		w.must(t, claimCmd(nsOther, "data", claim("batch-1", "n1", csi.ClaimWrite, fsSNW)))
		w.must(t, state.ReleaseClaims{AllocationID: "batch-1", ReleasedAt: t0})
		other := w.idx
		check(t, at(nsDefault, "data", released), at(nsDefault, "shared", checkpointed), at(nsOther, "data", other))

		// Freed (each the last claim on n1, with the attachment there):
		// default/shared keeps web-2's live claim but leaves the list.
		free := func(ns, vol, alloc string) state.Batch {
			return state.Batch{Commands: []state.Command{
				state.RemoveAttachment{Namespace: ns, VolumeID: vol, NodeID: "n1"},
				state.FreeClaim{Namespace: ns, VolumeID: vol, AllocationID: alloc},
			}}
		}
		w.must(t, free(nsDefault, "shared", "web-1"))
		check(t, at(nsDefault, "data", released), at(nsOther, "data", other))
		for _, v := range []struct{ ns, id, alloc string }{{nsDefault, "data", "web-1"}, {nsOther, "data", "batch-1"}} {
			w.must(t, state.CheckpointClaim{Namespace: v.ns, VolumeID: v.id, AllocationID: v.alloc, State: csi.ClaimReadyToFree})
			w.must(t, free(v.ns, v.id, v.alloc))
		}
		check(t)

		// A refused command leaves the list as it was.
		w.must(t, state.ReleaseClaims{AllocationID: "web-2", ReleasedAt: t0})
		check(t, at(nsDefault, "shared", w.idx))
		w.refuse(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-2", State: csi.ClaimTaken}, csi.ErrInvalidRequest)
		check(t, at(nsDefault, "shared", w.idx-1))
	})

	t.Run("PastClaimBlocksSingleNodeElsewhere", func(t *testing.T) {
		// A released claim keeps a single-node volume on its node until
		// the attachment there is removed: the attachment record decides,
		// not the claim's checkpoints.
		w := claimed(t)
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		cmd := claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW))
		w.refuse(t, cmd, csi.ErrAttachedElsewhere, "data", "n1")
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimNodeDetached})
		w.refuse(t, cmd, csi.ErrAttachedElsewhere, "data", "n1")
		w.must(t, state.DetachVolume{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"})
		w.refuse(t, cmd, csi.ErrAttachedElsewhere, "data", "n1")
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimControllerDetached})
		w.refuse(t, cmd, csi.ErrAttachedElsewhere, "data", "n1")
		w.must(t, state.RemoveAttachment{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"})
		// Detached: the past claim, not freed yet, no longer holds n1.
		w.must(t, cmd)
		w.must(t, state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"})
	})
}
