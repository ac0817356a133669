package state_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// releaseStore is a store of 100 nodes running n workload allocations,
// r<i> on node n<i%100>, each holding one claim on a volume of its own,
// and the UpsertAllocations that stops them all at once.
func releaseStore(b *testing.B, n int) (*benchStore, state.UpsertAllocations) {
	const nodes = 100
	s := newBenchStore(b)
	s.cluster(nodes, 0)
	allocs := make([]csi.Allocation, n)
	for i := range n {
		allocs[i] = csi.Allocation{ID: fmt.Sprintf("r%d", i), Namespace: "default", NodeID: fmt.Sprintf("n%d", i%nodes), JobID: "web"}
	}
	s.apply(state.UpsertAllocations{Allocations: allocs})
	s.volumes(n)
	claims := make([]state.Command, n)
	for i, a := range allocs {
		claims[i] = state.ClaimVolume{Namespace: "default", VolumeID: fmt.Sprintf("vol-%06d", i), Claim: csi.Claim{
			AllocationID: a.ID, NodeID: a.NodeID, Mode: csi.ClaimWrite,
			AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode,
		}}
	}
	s.batched(claims)
	stop := state.UpsertAllocations{Allocations: allocs, ReleasedAt: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	for i := range stop.Allocations {
		stop.Allocations[i].Terminal = true
	}
	return s, stop
}

// BenchmarkUpsertAllocations_ReleaseScale measures one UpsertAllocations
// that stops N allocations with one claim each, turning every claim into
// a past claim, at N = 2,500 and N = 10,000 in the same run.
// ns/claim-2.5k and ns/claim-10k are the cost per claim released;
// release-scale is their ratio, 1 for a release linear in the claims
// (goal: at most 1.3). Only the one Apply is timed: each iteration builds
// both stores again, since the release happens once per store.
func BenchmarkUpsertAllocations_ReleaseScale(b *testing.B) {
	sizes := []int{2_500, 10_000}
	perClaim := make([][]time.Duration, len(sizes))
	for b.Loop() {
		b.StopTimer()
		for i, n := range sizes {
			s, stop := releaseStore(b, n)
			runtime.GC() // measure without the setup's garbage
			s.idx++
			b.StartTimer()
			start := time.Now()
			_, err := s.s.Apply(s.idx, stop)
			took := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatalf("stop %d allocations: %v", n, err)
			}
			past, err := s.s.PastClaimVolumeIDs()
			if err != nil || len(past) != n {
				b.Fatalf("after stopping %d allocations: %d volumes with past claims, %v", n, len(past), err)
			}
			perClaim[i] = append(perClaim[i], took/time.Duration(n))
		}
		b.StartTimer()
	}
	small, big := median(perClaim[0]), median(perClaim[1])
	b.ReportMetric(small, "ns/claim-2.5k")
	b.ReportMetric(big, "ns/claim-10k")
	b.ReportMetric(big/small, "release-scale")
}
